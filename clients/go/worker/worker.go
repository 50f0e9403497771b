// Package worker runs a handler on the items of a Switchyard queue, as
// docs/worker-protocol.md describes: one Lease stream at a time, Concurrency
// handlers at once, settles on the stream (acks batched when the server takes
// ack_batch), automatic lease extension, graceful drain, and reconnection with
// jittered backoff.
//
// A handler's outcome: nil acks (with the replies set by Delivery.Reply);
// Drop(reason) drops; Retry(reason, delay) or any other error retries.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "switchyard/clients/go/switchyardpb"
)

// MaxMessageBytes is the server's default largest message (SWITCHYARD_MAX_MESSAGE_BYTES):
// dial with grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(worker.MaxMessageBytes)) and
// set Options.MaxMessageBytes to it.
const MaxMessageBytes = 64 << 20

const (
	silentIntervals   = 3                // heartbeat intervals of silence after which a stream is dead
	openTimeout       = 30 * time.Second // an open unanswered this long is given up
	tick              = 100 * time.Millisecond
	maxAckBatch       = 1000
	rememberedSettles = 10000
	unarySettleTime   = 30 * time.Second // how long a settle after its stream ended is tried while no server answers
)

// Options configure Run.
type Options struct {
	// Queue is a declared queue.
	Queue string
	// Group is the consumer group to read as, for a STREAM queue ("" for list queues).
	Group string
	// Concurrency is how many handlers run at once, and the stream's credit (default 1).
	Concurrency int
	// Handler is called once per delivery.
	Handler func(ctx context.Context, d *Delivery) error
	// Token is sent as "authorization: Bearer <token>" on every call, if set.
	Token string
	// ExtendEvery is how often a running item's lease is extended: 0 means half the
	// queue's min_idle (read with GetQueue; no extension if the token may not), a negative
	// value turns extension off.
	ExtendEvery time.Duration
	// AckOneByOne sends one ack message per item even when the server takes ack_batch.
	AckOneByOne bool
	// StopGrace bounds how long running handlers may take once ctx is cancelled (default 30s).
	StopGrace time.Duration
	// OnError hears of handler errors and failed settles (d is nil when unknown).
	OnError func(err error, d *pb.Delivery)
	// BackoffBase and BackoffCap shape the reconnection backoff (defaults 100ms, 5s).
	BackoffBase, BackoffCap time.Duration
	// MaxMessageBytes is the receive limit the connection was dialed with (MaxCallRecvMsgSize),
	// announced when a stream opens: the server keeps each delivery message within it. 0 means
	// gRPC's default, 4 MiB.
	MaxMessageBytes int
}

// announcedLimit is MaxMessageBytes as LeaseOpen carries it (a uint32; negative: none given).
func (o *Options) announcedLimit() uint32 {
	switch {
	case o.MaxMessageBytes <= 0:
		return 0
	case uint64(o.MaxMessageBytes) > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(o.MaxMessageBytes)
}

// Delivery is one leased item as a handler sees it.
type Delivery struct {
	*pb.Delivery
	ack *pb.AckRequest
}

// Reply makes the item's ack enqueue items onto queue (ttl 0: none) once the handler returns nil.
func (d *Delivery) Reply(queue string, ttl time.Duration, items ...*pb.EnqueueItem) {
	d.ack.ReplyQueue = queue
	d.ack.Replies = append(d.ack.Replies, items...)
	if ttl > 0 {
		d.ack.ReplyTtl = durationpb.New(ttl)
	}
}

type dropError struct{ reason string }

func (e *dropError) Error() string { return "drop: " + e.reason }

// Drop, returned by a handler, drops the item: it can never succeed (the reason is logged
// and kept with the item's history).
func Drop(reason string) error { return &dropError{reason} }

type retryError struct {
	reason string
	delay  time.Duration
}

func (e *retryError) Error() string { return "retry: " + e.reason }

// Retry, returned by a handler, retries the item: the next delivery carries reason as
// Delivery.LastError, and it comes no sooner than delay from now (0: the queue's retry
// policy). Any other error retries with its text as the reason.
func Retry(reason string, delay time.Duration) error { return &retryError{reason, delay} }

// Stats counts what a worker did; read it with Load at any time.
type Stats struct {
	Acked, Retried, Dropped, HandlerErrors, SettleFailures, Streams atomic.Int64
}

// Fatal reports whether a stream's end status means reconnecting cannot help.
func Fatal(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument,
		codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// Run leases from o.Queue and runs o.Handler until ctx is cancelled, then stops
// gracefully (no new items; running handlers finish within StopGrace and their items
// are settled) and returns nil. It returns the stream's status when reconnecting
// cannot help (queue not declared, no permission, ...). stats, if not nil, is kept up
// to date.
func Run(ctx context.Context, conn grpc.ClientConnInterface, o Options, stats *Stats) error {
	if o.Concurrency == 0 {
		o.Concurrency = 1
	}
	if o.Concurrency < 1 || o.Concurrency > 10000 {
		return fmt.Errorf("worker: Concurrency must be between 1 and 10000, not %d", o.Concurrency)
	}
	if o.Handler == nil || o.Queue == "" {
		return errors.New("worker: Options need a Queue and a Handler")
	}
	if o.StopGrace == 0 {
		o.StopGrace = 30 * time.Second
	}
	if stats == nil {
		stats = &Stats{}
	}
	r := &runner{o: o, client: pb.NewQueueServiceClient(conn), held: map[string]*held{}, stats: stats}
	r.handlerCtx, r.cancelHandlers = context.WithCancel(context.Background())
	defer r.cancelHandlers()
	r.work = make(chan *held, 2*o.Concurrency)
	for i := 0; i < o.Concurrency; i++ {
		r.pool.Add(1)
		go r.runHandlers()
	}
	defer func() {
		close(r.work)
		r.pool.Wait()
	}()
	return r.run(ctx)
}

type held struct {
	d        *Delivery
	s        *session
	extendAt time.Time // zero: not extended
}

type runner struct {
	o              Options
	client         pb.QueueServiceClient
	stats          *Stats
	handlerCtx     context.Context
	cancelHandlers context.CancelFunc
	work           chan *held
	pool           sync.WaitGroup

	mu            sync.Mutex
	held          map[string]*held
	current       *session
	declaredIdle  time.Duration
	declaredKnown bool
}

func (r *runner) outgoing(ctx context.Context) context.Context {
	if r.o.Token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+r.o.Token)
}

func (r *runner) report(err error, d *pb.Delivery) {
	if r.o.OnError != nil {
		r.o.OnError(err, d)
	}
}

func (r *runner) run(ctx context.Context) error {
	backoff := newBackoff(r.o.BackoffBase, r.o.BackoffCap)
	for ctx.Err() == nil {
		s, err := r.open()
		if err == nil {
			err = r.supervise(ctx, s)
		}
		if ctx.Err() != nil {
			break
		}
		if Fatal(err) {
			return err
		}
		if s != nil && s.isOpened() {
			backoff.reset()
		}
		delay := backoff.next()
		if err == nil {
			delay = time.Duration(rand.Int63n(int64(50 * time.Millisecond)))
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	r.finish()
	return nil
}

// open starts a stream; its credit leaves room for handlers still running from an earlier one.
func (r *runner) open() (*session, error) {
	r.mu.Lock()
	credit := r.o.Concurrency - len(r.held)
	if credit < 1 {
		credit = 1
	}
	r.mu.Unlock()
	streamCtx, cancel := context.WithCancel(r.outgoing(context.Background()))
	stream, err := r.client.Lease(streamCtx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := newSession(stream, cancel, credit)
	r.mu.Lock()
	r.current = s
	r.mu.Unlock()
	r.stats.Streams.Add(1)
	s.send <- &pb.LeaseRequest{Kind: &pb.LeaseRequest_Open{Open: &pb.LeaseOpen{Queue: r.o.Queue, Credit: uint32(credit), MaxMessageBytes: r.o.announcedLimit(), Group: r.o.Group}}}
	go s.sendLoop(r.o.AckOneByOne)
	go r.receive(s)
	return s, nil
}

// supervise waits for the stream's end or ctx's cancellation, extending leases and
// cancelling a stream that went silent meanwhile. It returns the stream's end status.
func (r *runner) supervise(ctx context.Context, s *session) error {
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-s.done:
			return s.err
		case <-ctx.Done():
			return nil
		case now := <-ticker.C:
			opened, heartbeat := s.openedInfo()
			if !opened {
				if now.Sub(s.started) > openTimeout {
					s.cancel()
				}
				continue
			}
			if now.Sub(s.lastMessage()) > silentIntervals*heartbeat {
				s.cancel()
				continue
			}
			r.extendDue(now)
		}
	}
}

// finish is the graceful stop: credit 0, running handlers finish and settle, half-close.
func (r *runner) finish() {
	r.mu.Lock()
	s := r.current
	r.mu.Unlock()
	if s != nil {
		s.enqueue(&pb.LeaseRequest{Kind: &pb.LeaseRequest_Credit{Credit: &pb.LeaseCredit{Credit: 0}}})
	}
	deadline := time.Now().Add(r.o.StopGrace)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.held)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		r.extendDue(time.Now())
		time.Sleep(10 * time.Millisecond)
	}
	r.cancelHandlers()
	if s != nil {
		s.closeSend()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cancel()
		}
	}
}

func (r *runner) receive(s *session) {
	defer s.end()
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			if err != io.EOF {
				s.err = err
			}
			return
		}
		s.touch()
		switch k := resp.Kind.(type) {
		case *pb.LeaseResponse_Deliveries:
			for _, d := range k.Deliveries.Deliveries {
				r.take(s, d)
			}
		case *pb.LeaseResponse_Opened:
			s.setOpened(k.Opened, r.extensionInterval(k.Opened))
		case *pb.LeaseResponse_SettleResult:
			r.settleResult(s, k.SettleResult)
		case *pb.LeaseResponse_Drain:
			s.drained = true
		}
	}
}

func (r *runner) take(s *session, d *pb.Delivery) {
	h := &held{d: &Delivery{Delivery: d, ack: &pb.AckRequest{LeaseToken: d.LeaseToken}}, s: s}
	if every := s.extendEvery; every > 0 {
		h.extendAt = time.Now().Add(every)
	}
	r.mu.Lock()
	r.held[d.LeaseToken] = h
	r.mu.Unlock()
	r.work <- h
}

func (r *runner) runHandlers() {
	defer r.pool.Done()
	for h := range r.work {
		r.handle(h)
	}
}

func (r *runner) handle(h *held) {
	d := h.d
	err := r.callHandler(d)
	var req *pb.LeaseRequest
	var drop *dropError
	var retry *retryError
	switch {
	case err == nil:
		req = &pb.LeaseRequest{Kind: &pb.LeaseRequest_Ack{Ack: d.ack}}
		r.stats.Acked.Add(1)
	case errors.As(err, &drop):
		req = &pb.LeaseRequest{Kind: &pb.LeaseRequest_Drop{Drop: &pb.DropRequest{LeaseToken: d.LeaseToken, Reason: drop.reason}}}
		r.stats.Dropped.Add(1)
	default:
		rr := &pb.RetryRequest{LeaseToken: d.LeaseToken, Reason: reason(err)}
		if errors.As(err, &retry) {
			rr.Reason = retry.reason
			if retry.delay > 0 {
				rr.Delay = durationpb.New(retry.delay)
			}
		} else {
			r.stats.HandlerErrors.Add(1)
			r.report(err, d.Delivery)
		}
		req = &pb.LeaseRequest{Kind: &pb.LeaseRequest_Retry{Retry: rr}}
		r.stats.Retried.Add(1)
	}
	r.settle(h, req)
}

// callHandler runs the handler; a panic counts as an error (the item is retried).
func (r *runner) callHandler(d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.o.Handler(r.handlerCtx, d)
}

func (r *runner) settle(h *held, req *pb.LeaseRequest) {
	token := h.d.LeaseToken
	r.mu.Lock()
	delete(r.held, token)
	current := r.current
	if current != h.s && !current.isDone() && current.credit < r.o.Concurrency {
		// An earlier stream's item is done: the current stream may hold one more.
		current.credit++
		current.enqueue(&pb.LeaseRequest{Kind: &pb.LeaseRequest_Credit{Credit: &pb.LeaseCredit{Credit: uint32(current.credit)}}})
	}
	r.mu.Unlock()
	h.s.remember(token, req)
	if !h.s.enqueue(req) {
		r.settleUnary(req, h.d.Delivery)
	}
}

// settleUnary settles by token after the item's stream ended. A server that saw the end
// returned the item (FAILED_PRECONDITION); one that died did not, and the settle is tried
// again while no server answers, for up to unarySettleTime.
func (r *runner) settleUnary(req *pb.LeaseRequest, d *pb.Delivery) {
	backoff := newBackoff(0, 0)
	deadline := time.Now().Add(unarySettleTime)
	for {
		ctx, cancel := context.WithTimeout(r.outgoing(context.Background()), 10*time.Second)
		var err error
		switch k := req.Kind.(type) {
		case *pb.LeaseRequest_Ack:
			_, err = r.client.Ack(ctx, k.Ack, grpc.WaitForReady(true))
		case *pb.LeaseRequest_Retry:
			_, err = r.client.Retry(ctx, k.Retry, grpc.WaitForReady(true))
		case *pb.LeaseRequest_Drop:
			_, err = r.client.Drop(ctx, k.Drop, grpc.WaitForReady(true))
		}
		cancel()
		code := status.Code(err)
		if (code == codes.Unavailable || code == codes.DeadlineExceeded) && time.Now().Before(deadline) {
			time.Sleep(backoff.next())
			continue
		}
		if err != nil && code != codes.FailedPrecondition {
			r.stats.SettleFailures.Add(1)
			r.report(err, d)
		}
		return
	}
}

func (r *runner) settleResult(s *session, res *pb.SettleResult) {
	if res.Code == int32(codes.OK) {
		return // an extend that applied
	}
	if res.Code == int32(codes.Unavailable) {
		if req := s.forget(res.LeaseToken); req != nil {
			s.enqueue(req) // sent again once; a second failure is reported
			return
		}
	}
	r.stats.SettleFailures.Add(1)
	r.mu.Lock()
	h := r.held[res.LeaseToken]
	if h != nil {
		h.extendAt = time.Time{} // the lease is lost: extending it again cannot help
	}
	r.mu.Unlock()
	var d *pb.Delivery
	if h != nil {
		d = h.d.Delivery
	}
	r.report(settleError(codes.Code(res.Code), res.Message, res.Reason), d)
}

// extensionInterval is how often this stream's items are extended (0: never).
func (r *runner) extensionInterval(opened *pb.LeaseOpened) time.Duration {
	if r.o.ExtendEvery != 0 {
		if r.o.ExtendEvery < 0 {
			return 0
		}
		return r.o.ExtendEvery
	}
	if idle := opened.GetMinIdle(); idle != nil {
		return idle.AsDuration() / 2
	}
	if opened.Mode != pb.QueueMode_QUEUE_MODE_RELIABLE {
		return 0
	}
	r.mu.Lock()
	known := r.declaredKnown
	r.mu.Unlock()
	if !known {
		// A server before LeaseOpened.min_idle: the declaration has it, if the token may read it.
		ctx, cancel := context.WithTimeout(r.outgoing(context.Background()), 10*time.Second)
		res, err := r.client.GetQueue(ctx, &pb.GetQueueRequest{Name: r.o.Queue})
		cancel()
		var idle time.Duration
		if err == nil && res.Queue.GetMinIdle() != nil {
			idle = res.Queue.GetMinIdle().AsDuration()
		}
		r.mu.Lock()
		r.declaredIdle, r.declaredKnown = idle, true
		r.mu.Unlock()
	}
	return r.declaredIdle / 2
}

// reason is what a failed handler's error says, cut to the 1,000 characters the server keeps.
func reason(err error) string {
	s := err.Error()
	if len(s) > 1000 {
		s = s[:1000]
	}
	return s
}

func (r *runner) extendDue(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for token, h := range r.held {
		if h.extendAt.IsZero() || now.Before(h.extendAt) || h.s.isDone() {
			continue
		}
		h.s.enqueue(&pb.LeaseRequest{Kind: &pb.LeaseRequest_Extend{Extend: &pb.ExtendLeaseRequest{LeaseToken: token}}})
		h.extendAt = now.Add(h.s.extendEvery)
	}
}

// backoff is exponential with full jitter: the n-th wait in a row is uniform in [0, min(cap, base·2ⁿ)].
type backoff struct {
	base, cap time.Duration
	attempt   uint
}

func newBackoff(base, cap time.Duration) *backoff {
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if cap <= 0 {
		cap = 5 * time.Second
	}
	return &backoff{base: base, cap: cap}
}

func (b *backoff) next() time.Duration {
	limit := b.cap
	if b.attempt < 16 && b.base<<b.attempt < b.cap {
		limit = b.base << b.attempt
	}
	b.attempt++
	return time.Duration(rand.Int63n(int64(limit) + 1))
}

func (b *backoff) reset() { b.attempt = 0 }
