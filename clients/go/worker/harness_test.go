package worker_test

// Real parts for the tests: a private redis-server on a unix socket and Switchyard
// servers (node dist/main.js of the checkout), on loopback. SWITCHYARD_REPO names the
// checkout (default: three folders up), SWITCHYARD_NODE the node binary (default: node).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "switchyard/clients/go/switchyardpb"
	"switchyard/clients/go/worker"
)

func repo() string {
	if r := os.Getenv("SWITCHYARD_REPO"); r != "" {
		return r
	}
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", "..")
}

func node() string {
	if n := os.Getenv("SWITCHYARD_NODE"); n != "" {
		return n
	}
	return "node"
}

// owner is what starts a process and stops it later: a test (*testing.T), or TestMain's mainOwner.
type owner interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...interface{})
	TempDir() string
}

// mainOwner owns what TestMain starts for every test: stopped after them, in reverse order.
type mainOwner struct{ cleanups []func() }

func (*mainOwner) Helper()            {}
func (o *mainOwner) Cleanup(f func()) { o.cleanups = append(o.cleanups, f) }
func (o *mainOwner) Fatalf(format string, args ...interface{}) {
	o.stop()
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
func (o *mainOwner) TempDir() string {
	dir, err := os.MkdirTemp("", "sy-go-test-")
	if err != nil {
		o.Fatalf("%v", err)
	}
	o.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
func (o *mainOwner) stop() {
	for i := len(o.cleanups) - 1; i >= 0; i-- {
		o.cleanups[i]()
	}
	o.cleanups = nil
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t owner, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type testRedis struct{ socket string }

func startRedis(t owner) *testRedis {
	dir := t.TempDir()
	socket := filepath.Join(dir, "redis.sock")
	cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	waitFor(t, 10*time.Second, "redis-server's socket", func() bool { _, err := os.Stat(socket); return err == nil })
	return &testRedis{socket: socket}
}

type testServer struct {
	cmd  *exec.Cmd
	addr string
}

// startServer runs a Switchyard instance against r; env adds SWITCHYARD_* settings.
func startServer(t owner, r *testRedis, env ...string) *testServer {
	cmd := exec.Command(node(), filepath.Join(repo(), "dist", "main.js"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWITCHYARD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SWITCHYARD_REDIS_URL=unix://"+r.socket, "SWITCHYARD_GRPC_ADDRESS=127.0.0.1:0",
		"SWITCHYARD_HTTP_ADDRESS=off", "SWITCHYARD_LOG_LEVEL=error", "SWITCHYARD_AUTH=off")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("node dist/main.js: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "switchyard listening on ") {
		t.Fatalf("Switchyard did not start (is dist/ built?): %q %v", line, err)
	}
	return &testServer{cmd: cmd, addr: strings.TrimSpace(strings.TrimPrefix(line, "switchyard listening on "))}
}

// forwarder passes TCP connections to target; while frozen, no byte moves either way
// though the sockets stay open, as behind a proxy whose upstream hung.
type forwarder struct {
	addr   string
	frozen atomic.Bool
}

func forward(t *testing.T, target string) *forwarder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f := &forwarder{addr: ln.Addr().String()}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			upstream, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go f.pump(client, upstream)
			go f.pump(upstream, client)
		}
	}()
	return f
}

func (f *forwarder) pump(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		for f.frozen.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// bearer sends a token with every call of a connection (plaintext on loopback is fine here).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

func dial(t testing.TB, addr string) *grpc.ClientConn { return dialAs(t, addr, "") }

// dialAs dials addr; with a token, every call on the connection carries it.
func dialAs(t testing.TB, addr, token string) *grpc.ClientConn {
	options := []grpc.DialOption{grpc.WithInsecure(), // grpc-go 1.33 (Debian) has no credentials/insecure
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(worker.MaxMessageBytes))}
	if token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.Dial(addr, options...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func stats(t testing.TB, c pb.QueueServiceClient, queue string) *pb.QueueStats {
	res, err := c.GetQueueStats(ctxT(t), &pb.GetQueueStatsRequest{Name: queue})
	if err != nil {
		t.Fatalf("GetQueueStats %s: %v", queue, err)
	}
	return res.Stats
}

// enqueue pushes n items "<prefix><i>" in requests of 1000; returns their ids.
func enqueue(t testing.TB, c pb.QueueServiceClient, queue, prefix string, n int) []string {
	var ids []string
	for from := 0; from < n; from += 1000 {
		var items []*pb.EnqueueItem
		for i := from; i < n && i < from+1000; i++ {
			items = append(items, &pb.EnqueueItem{Payload: []byte(prefix + strconv.Itoa(i))})
		}
		res, err := c.Enqueue(ctxT(t), &pb.EnqueueRequest{Queue: queue, Items: items})
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		ids = append(ids, res.Ids...)
	}
	return ids
}
