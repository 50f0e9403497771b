package worker_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "switchyard/clients/go/switchyardpb"
	"switchyard/clients/go/worker"
)

// The tokens of the shared server: one may do everything, one may only lease (it cannot
// read a declaration).
const adminToken, leaserToken = "admin-token", "leaser-token"

// sharedAddr is the server every test uses: auth on, the watchdog every 100 ms, a
// heartbeat on idle streams every second. TestMain starts it (and its Redis) and stops it.
var sharedAddr string

// The SIGKILL test runs its first worker as a child process: this test binary again,
// with SY_GO_CHILD_ADDR set. The child writes each item's id to SY_GO_CHILD_LOG before
// its handler returns (so before the ack), and runs until it is killed.
func TestMain(m *testing.M) {
	if addr := os.Getenv("SY_GO_CHILD_ADDR"); addr != "" {
		os.Exit(child(addr, os.Getenv("SY_GO_CHILD_QUEUE"), os.Getenv("SY_GO_CHILD_LOG")))
	}
	tokens := fmt.Sprintf(`[{"name":"admin","sha256":"%x","scopes":["*"]},{"name":"leaser","sha256":"%x","scopes":["queue:lease"]}]`,
		sha256.Sum256([]byte(adminToken)), sha256.Sum256([]byte(leaserToken)))
	shared := &mainOwner{}
	// Heartbeats every second: a worker takes 3 s without a message for a dead stream. With 300 ms a
	// loaded machine's pauses (a 5 MB delivery, a starved process) read as silence and items came twice.
	sharedAddr = startServer(shared, startRedis(shared), "SWITCHYARD_WATCHDOG_INTERVAL=100ms", "SWITCHYARD_HEARTBEAT_INTERVAL=1s",
		"SWITCHYARD_AUTH=on", "SWITCHYARD_AUTH_TOKENS="+tokens,
		// Items up to 8 MiB stored (headers count): more than gRPC's default 4 MiB receive limit.
		"SWITCHYARD_MAX_ITEM_BYTES=8388608").addr
	code := m.Run()
	shared.stop()
	os.Exit(code)
}

func child(addr, queue, logPath string) int {
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn := dialAs(&testing.T{}, addr, adminToken)
	var mu sync.Mutex
	err = worker.Run(context.Background(), conn, worker.Options{
		Queue: queue, Concurrency: credit, AckOneByOne: true,
		Handler: func(_ context.Context, d *worker.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			_, err := log.WriteString(d.Id + "\n")
			return err
		},
	}, nil)
	fmt.Fprintln(os.Stderr, "child worker ended:", err)
	return 2
}

// credit is the throughput and SIGKILL tests' concurrency (and stream credit).
const credit = 200

// reliableQueue declares the RELIABLE queue on the shared server and enqueues n items
// "<prefix><i>"; it returns an admin connection, a client and the ids.
func reliableQueue(t *testing.T, queue, prefix string, n int) (*grpc.ClientConn, pb.QueueServiceClient, []string) {
	conn := dialAs(t, sharedAddr, adminToken)
	c := pb.NewQueueServiceClient(conn)
	declare(t, c, reliable(queue))
	return conn, c, enqueue(t, c, queue, prefix, n)
}

func declare(t *testing.T, c pb.QueueServiceClient, q *pb.Queue) {
	t.Helper()
	if _, err := c.CreateQueue(ctxT(t), &pb.CreateQueueRequest{Queue: q}); err != nil {
		t.Fatalf("CreateQueue %s: %v", q.Name, err)
	}
}

func reliable(name string) *pb.Queue {
	return &pb.Queue{Name: name, Mode: pb.QueueMode_QUEUE_MODE_RELIABLE}
}

func envInt(name string, fallback int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return fallback
}

// runWorker runs worker.Run in the background; the returned stop cancels it and returns Run's result.
func runWorker(t *testing.T, conn grpc.ClientConnInterface, o worker.Options, s *worker.Stats) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, conn, o, s) }()
	var once sync.Once
	var result error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-done:
			case <-time.After(40 * time.Second):
				result = errors.New("worker.Run did not return within 40s of its context's end")
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// cpuTime is the CPU this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// One ack message per item (no ack_batch), every item exactly once. The rate is printed:
// it is the server's on a shared machine. What the client itself costs is asserted: its
// CPU time per item, which other processes' load hardly moves. SY_GO_MIN_RATE (items/s,
// default 0: none) adds a floor for a quiet machine.
func TestMovesItemsWithOneAckPerItem(t *testing.T) {
	n := envInt("SY_GO_ITEMS", 30000)
	minRate := envInt("SY_GO_MIN_RATE", 0)
	// A server of its own with auth off, as the figure to compare with was measured.
	conn := dial(t, startServer(t, startRedis(t)).addr)
	c := pb.NewQueueServiceClient(conn)
	declare(t, c, reliable("{speed}"))
	ids := enqueue(t, c, "{speed}", "item ", n)

	var mu sync.Mutex
	seen := make(map[string]int, n)
	var s worker.Stats
	start, cpuAtStart := time.Now(), cpuTime()
	stop := runWorker(t, conn, worker.Options{
		Queue: "{speed}", Concurrency: credit, AckOneByOne: true,
		Handler: func(_ context.Context, d *worker.Delivery) error {
			mu.Lock()
			seen[d.Id]++
			mu.Unlock()
			return nil
		},
	}, &s)
	waitFor(t, 120*time.Second, "every item acked", func() bool { return stats(t, c, "{speed}").CompletedTotal == int64(n) })
	elapsed, cpu := time.Since(start), cpuTime()-cpuAtStart
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rate := float64(n) / elapsed.Seconds()
	perItem := cpu / time.Duration(n)
	fmt.Printf("GO WORKER RATE %.0f items/s (%d items in %s, one ack message per item, credit %d; the worker process used %s of CPU per item)\n",
		rate, n, elapsed.Round(time.Millisecond), credit, perItem)
	st := stats(t, c, "{speed}")
	if st.Ready != 0 || st.Processing != 0 || st.DeadLetter != 0 || st.LeasedTotal != int64(n) {
		t.Fatalf("queue not drained exactly once: %v", st)
	}
	if len(seen) != n {
		t.Fatalf("%d distinct items handled, want %d", len(seen), n)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("item %s handled %d times, want once", id, seen[id])
		}
	}
	if s.Acked.Load() != int64(n) {
		t.Fatalf("worker acked %d, want %d", s.Acked.Load(), n)
	}
	// ~12µs measured here; a client that waited on each ack, or copied per item, would cost far more.
	if perItem > 100*time.Microsecond {
		t.Fatalf("the worker process used %s of CPU per item; more than 100µs", perItem)
	}
	if rate < float64(minRate) {
		t.Fatalf("%.0f items/s, below SY_GO_MIN_RATE=%d", rate, minRate)
	}
}

// A worker process killed with SIGKILL mid-stream loses nothing: the server returns the
// items it held at once, and another worker finishes the queue.
func TestLosesNothingWhenSIGKILLed(t *testing.T) {
	n := envInt("SY_GO_KILL_ITEMS", 15000)
	conn, c, ids := reliableQueue(t, "{kill}", "item ", n)

	logPath := filepath.Join(t.TempDir(), "handled")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SY_GO_CHILD_ADDR="+conn.Target(), "SY_GO_CHILD_QUEUE={kill}", "SY_GO_CHILD_LOG="+logPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the child to handle a third of the items", func() bool { return len(readLines(logPath)) >= n/3 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	byChild := readLines(logPath)
	// The server sees the connection drop and puts the child's items back at once.
	waitFor(t, 10*time.Second, "the killed worker's items to return", func() bool { return stats(t, c, "{kill}").Processing == 0 })
	afterKill := stats(t, c, "{kill}")

	var mu sync.Mutex
	var byFinisher []string
	stop := runWorker(t, conn, worker.Options{
		Queue: "{kill}", Concurrency: 50,
		Handler: func(_ context.Context, d *worker.Delivery) error {
			mu.Lock()
			byFinisher = append(byFinisher, d.Id)
			mu.Unlock()
			return nil
		},
	}, nil)
	waitFor(t, 60*time.Second, "every item acked", func() bool { return stats(t, c, "{kill}").CompletedTotal == int64(n) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := stats(t, c, "{kill}")
	if st.Ready != 0 || st.Processing != 0 || st.DeadLetter != 0 || st.CompletedTotal != int64(n) {
		t.Fatalf("after the finisher: %v", st)
	}
	handled := map[string]int{}
	for _, id := range append(byChild, byFinisher...) {
		handled[id]++
	}
	var missing []string
	twice := 0
	for _, id := range ids {
		switch {
		case handled[id] == 0:
			missing = append(missing, id)
		case handled[id] > 1:
			twice++
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%d items never handled, e.g. %v", len(missing), missing[:1])
	}
	// Handled twice: only items the child held, handled but not yet acked, when it died.
	if twice > credit {
		t.Fatalf("%d items handled twice; at most the child's credit (%d) may be", twice, credit)
	}
	returned := afterKill.Ready - (int64(n) - afterKill.LeasedTotal) // ready items that had been leased
	fmt.Printf("GO WORKER SIGKILL %d items: the child handled %d before SIGKILL; %d went back to the queue at once; %d handled twice; 0 lost\n",
		n, len(byChild), returned, twice)
}

func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func TestOutcomes(t *testing.T) {
	conn := dialAs(t, sharedAddr, adminToken)
	c := pb.NewQueueServiceClient(conn)
	declare(t, c, reliable("{out}"))
	declare(t, c, &pb.Queue{Name: "{out}.replies", Mode: pb.QueueMode_QUEUE_MODE_SIMPLE})
	ids := enqueue(t, c, "{out}", "", 4) // payloads "0" drop, "1" retry, "2" failure, "3" reply
	var mu sync.Mutex
	var seen []string
	var errs []error
	lastErrors := map[string]string{}
	var s worker.Stats
	stop := runWorker(t, conn, worker.Options{
		Queue: "{out}", Concurrency: 2,
		OnError: func(err error, d *pb.Delivery) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", d.GetId(), err))
			mu.Unlock()
		},
		Handler: func(_ context.Context, d *worker.Delivery) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s#%d", d.Payload, d.DeliveryCount))
			if d.DeliveryCount > 1 {
				lastErrors[string(d.Payload)] = d.LastError
			}
			mu.Unlock()
			switch string(d.Payload) {
			case "0":
				return worker.Drop("never valid")
			case "1":
				if d.DeliveryCount == 1 {
					return worker.Retry("not yet", 0)
				}
			case "2":
				if d.DeliveryCount == 1 {
					panic("flaky dependency")
				}
			case "3":
				d.Reply("{out}.replies", time.Hour, &pb.EnqueueItem{Payload: []byte("thumbnail"), Headers: map[string]string{"of": d.Id}})
			}
			return nil
		},
	}, &s)
	waitFor(t, 15*time.Second, "4 items completed", func() bool { return stats(t, c, "{out}").CompletedTotal == 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(seen)
	if got := strings.Join(seen, " "); got != "0#1 1#1 1#2 2#1 2#2 3#1" {
		t.Fatalf("deliveries %q", got)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), ids[2]+": handler panicked: flaky dependency") {
		t.Fatalf("OnError heard %v", errs)
	}
	if s.Acked.Load() != 3 || s.Dropped.Load() != 1 || s.Retried.Load() != 2 || s.HandlerErrors.Load() != 1 {
		t.Fatalf("stats acked %d dropped %d retried %d errors %d", s.Acked.Load(), s.Dropped.Load(), s.Retried.Load(), s.HandlerErrors.Load())
	}
	// The reason of a retry comes back with the next delivery.
	want := map[string]string{"1": "not yet", "2": "handler panicked: flaky dependency"}
	if fmt.Sprint(lastErrors) != fmt.Sprint(want) {
		t.Fatalf("last errors %v, want %v", lastErrors, want)
	}
	peek, err := c.PeekQueue(ctxT(t), &pb.PeekQueueRequest{Name: "{out}.replies"})
	if err != nil || len(peek.Items) != 1 || string(peek.Items[0].Payload) != "thumbnail" || peek.Items[0].Headers["of"] != ids[3] {
		t.Fatalf("replies %v %v", peek, err)
	}
}

// A retry with a delay comes back no sooner, with its reason as the next delivery's LastError.
func TestRetryWithADelay(t *testing.T) {
	conn, _, _ := reliableQueue(t, "{later}", "x", 1)
	type seen struct {
		at        time.Time
		count     uint32
		lastError string
	}
	deliveries := make(chan seen, 2)
	stop := runWorker(t, conn, worker.Options{
		Queue: "{later}",
		Handler: func(_ context.Context, d *worker.Delivery) error {
			deliveries <- seen{time.Now(), d.DeliveryCount, d.LastError}
			if d.DeliveryCount == 1 {
				return worker.Retry("busy", time.Second)
			}
			return nil
		},
	}, nil)
	first, second := <-deliveries, <-deliveries
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if first.count != 1 || first.lastError != "" || second.count != 2 || second.lastError != "busy" {
		t.Fatalf("deliveries %+v then %+v", first, second)
	}
	if gap := second.at.Sub(first.at); gap < 900*time.Millisecond {
		t.Fatalf("the retry came back after %s, before its 1 s delay", gap)
	}
}

// A stream announces Options.MaxMessageBytes: an item that needs a message over gRPC's
// default 4 MiB arrives (without it the server keeps to 4 MiB and dead-letters the item).
func TestAnnouncesItsReceiveLimit(t *testing.T) {
	conn := dialAs(t, sharedAddr, adminToken)
	c := pb.NewQueueServiceClient(conn)
	declare(t, c, reliable("{big}"))
	pad := strings.Repeat("x", 5_000_000)
	items := []*pb.EnqueueItem{{Payload: []byte("big"), Headers: map[string]string{"pad": pad}}, {Payload: []byte("small")}}
	if _, err := c.Enqueue(ctxT(t), &pb.EnqueueRequest{Queue: "{big}", Items: items}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	got := make(chan string, 2)
	stop := runWorker(t, conn, worker.Options{
		Queue: "{big}", MaxMessageBytes: worker.MaxMessageBytes,
		Handler: func(_ context.Context, d *worker.Delivery) error {
			got <- fmt.Sprintf("%s/%d", d.Payload, len(d.Headers["pad"]))
			return nil
		},
	}, nil)
	var delivered []string
	for len(delivered) < 2 {
		select {
		case d := <-got:
			delivered = append(delivered, d)
		case <-time.After(20 * time.Second):
			t.Fatalf("delivered %v within 20 s, want both items (dead letters: %d)", delivered, stats(t, c, "{big}").DeadLetter)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if first, second := delivered[0], delivered[1]; first != "big/5000000" || second != "small/0" {
		t.Fatalf("delivered %s then %s, want big/5000000 then small/0", first, second)
	}
	if dead := stats(t, c, "{big}").DeadLetter; dead != 0 {
		t.Fatalf("%d dead-lettered, want 0", dead)
	}
}

func TestAnUndeclaredQueueEndsRunWithNotFound(t *testing.T) {
	err := worker.Run(ctxT(t), dialAs(t, sharedAddr, adminToken), worker.Options{Queue: "{nobody}", Handler: func(context.Context, *worker.Delivery) error { return nil }}, nil)
	if status.Code(err) != codes.NotFound || !worker.Fatal(err) || worker.Reason(err) != "QUEUE_NOT_FOUND" {
		t.Fatalf("Run returned %v (reason %q), want NOT_FOUND with reason QUEUE_NOT_FOUND", err, worker.Reason(err))
	}
}

func TestStopLetsRunningHandlersFinishAndSettle(t *testing.T) {
	conn, c, _ := reliableQueue(t, "{stop}", "", 20)
	started := make(chan struct{}, 20)
	var mu sync.Mutex
	handled := 0
	stop := runWorker(t, conn, worker.Options{
		Queue: "{stop}", Concurrency: 4,
		Handler: func(context.Context, *worker.Delivery) error {
			started <- struct{}{}
			time.Sleep(500 * time.Millisecond)
			mu.Lock()
			handled++
			mu.Unlock()
			return nil
		},
	}, nil)
	for i := 0; i < 4; i++ {
		<-started
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := stats(t, c, "{stop}")
	if st.CompletedTotal != int64(handled) || st.Processing != 0 || st.Ready != int64(20-handled) || handled < 4 {
		t.Fatalf("handled %d; stats %v", handled, st)
	}
}

// A stream that hears nothing (heartbeats included) for three heartbeat intervals is replaced.
func TestReplacesAStreamThatWentSilent(t *testing.T) {
	direct := pb.NewQueueServiceClient(dialAs(t, sharedAddr, adminToken))
	declare(t, direct, reliable("{silent}"))
	hop := forward(t, sharedAddr)
	seen := make(chan string, 2)
	var s worker.Stats
	stop := runWorker(t, dialAs(t, hop.addr, adminToken), worker.Options{
		Queue: "{silent}",
		Handler: func(_ context.Context, d *worker.Delivery) error {
			seen <- string(d.Payload)
			return nil
		},
	}, &s)
	enqueue(t, direct, "{silent}", "before ", 1)
	if got := <-seen; got != "before 0" {
		t.Fatalf("got %q", got)
	}
	hop.frozen.Store(true) // nothing crosses now, not even heartbeats
	waitFor(t, 10*time.Second, "a new stream after the silence", func() bool { return s.Streams.Load() == 2 })
	hop.frozen.Store(false)
	enqueue(t, direct, "{silent}", "after ", 1)
	select {
	case got := <-seen:
		if got != "after 0" {
			t.Fatalf("got %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the item after the silence never came")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A job longer than min_idle keeps its item only while its lease is extended: by default
// every half min_idle, which LeaseOpened tells even a token that may not read the declaration.
func TestExtendsLongJobs(t *testing.T) {
	c := pb.NewQueueServiceClient(dialAs(t, sharedAddr, adminToken))
	for _, tc := range []struct {
		queue, token string
		extendEvery  time.Duration
		want         string
	}{{"{auto}", adminToken, 0, "[1]"}, {"{off}", adminToken, -1, "[1 2]"}, {"{lease-only}", leaserToken, 0, "[1]"}} {
		tc := tc
		t.Run(tc.queue, func(t *testing.T) {
			t.Parallel() // the jobs run at once: each takes 4.5 s
			declare(t, c, &pb.Queue{Name: tc.queue, Mode: pb.QueueMode_QUEUE_MODE_RELIABLE, RecoverySet: tc.queue + ".claims", MinIdle: durationpb.New(2 * time.Second)})
			enqueue(t, c, tc.queue, "long", 1)
			var mu sync.Mutex
			var counts []uint32
			firstDone := make(chan struct{})
			stop := runWorker(t, dialAs(t, sharedAddr, tc.token), worker.Options{
				Queue: tc.queue, Concurrency: 2, ExtendEvery: tc.extendEvery,
				Handler: func(_ context.Context, d *worker.Delivery) error {
					mu.Lock()
					counts = append(counts, d.DeliveryCount)
					mu.Unlock()
					if d.DeliveryCount == 1 {
						time.Sleep(4500 * time.Millisecond) // past min_idle by more than a loaded machine's lag
						close(firstDone)
					}
					return nil
				},
			}, nil)
			<-firstDone
			waitFor(t, 10*time.Second, tc.queue+" settled", func() bool {
				st := stats(t, c, tc.queue)
				return st.Processing == 0 && st.CompletedTotal == 1
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got := fmt.Sprint(counts)
			mu.Unlock()
			if got != tc.want {
				t.Errorf("%s: delivery counts %s, want %s", tc.queue, got, tc.want)
			}
		})
	}
}
