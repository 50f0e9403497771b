package worker

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	pb "switchyard/clients/go/switchyardpb"
)

// session is one Lease stream: a goroutine that owns its sends (gRPC streams take one
// sender at a time), the receive loop in runner.receive, and what the worker learnt on it.
type session struct {
	stream  pb.QueueService_LeaseClient
	cancel  context.CancelFunc
	send    chan *pb.LeaseRequest
	closing chan struct{}
	done    chan struct{}
	err     error // the end status (nil: OK); set before done closes
	started time.Time
	credit  int  // guarded by runner.mu
	drained bool // receive loop only

	// Set once when opened arrives, before any delivery is read.
	opened      atomic.Pointer[pb.LeaseOpened]
	extendEvery time.Duration

	last      atomic.Int64 // unix nanoseconds of the last message received
	closeOnce sync.Once

	mu    sync.Mutex
	sent  map[string]*pb.LeaseRequest // recent settles, to send again after UNAVAILABLE
	order []string
}

func newSession(stream pb.QueueService_LeaseClient, cancel context.CancelFunc, credit int) *session {
	s := &session{
		stream:  stream,
		cancel:  cancel,
		send:    make(chan *pb.LeaseRequest, 4*credit+16),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		started: time.Now(),
		credit:  credit,
		sent:    map[string]*pb.LeaseRequest{},
	}
	s.touch()
	return s
}

func (s *session) touch()                 { s.last.Store(time.Now().UnixNano()) }
func (s *session) lastMessage() time.Time { return time.Unix(0, s.last.Load()) }
func (s *session) isOpened() bool         { return s.opened.Load() != nil }

func (s *session) setOpened(o *pb.LeaseOpened, extendEvery time.Duration) {
	s.extendEvery = extendEvery
	s.opened.Store(o)
}

// openedInfo says whether the stream is open, and its heartbeat interval.
func (s *session) openedInfo() (bool, time.Duration) {
	o := s.opened.Load()
	if o == nil {
		return false, 0
	}
	hb := o.GetHeartbeatInterval().AsDuration()
	if hb <= 0 {
		hb = 15 * time.Second
	}
	return true, hb
}

func (s *session) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// end closes the session once its receive loop is over, and releases the stream.
func (s *session) end() {
	close(s.done)
	s.cancel()
}

// enqueue queues a request behind the earlier ones; false once the stream has ended.
func (s *session) enqueue(req *pb.LeaseRequest) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	select {
	case s.send <- req:
		return true
	case <-s.done:
		return false
	}
}

// closeSend half-closes the stream once every request queued before it is sent.
func (s *session) closeSend() { s.closeOnce.Do(func() { close(s.closing) }) }

func (s *session) remember(token string, req *pb.LeaseRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent[token] = req
	s.order = append(s.order, token)
	if len(s.order) > rememberedSettles {
		delete(s.sent, s.order[0])
		s.order = s.order[1:]
	}
}

// forget returns the settle remembered for token, and forgets it.
func (s *session) forget(token string) *pb.LeaseRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := s.sent[token]
	delete(s.sent, token)
	return req
}

func plainAck(req *pb.LeaseRequest) bool {
	a, ok := req.Kind.(*pb.LeaseRequest_Ack)
	return ok && len(a.Ack.Replies) == 0
}

// sendLoop writes the queued requests in order. When the server said ack_batches (and
// oneByOne is off), acks without replies that wait together go out as one ack_batch, in
// their place in the order; a lone ack goes at once.
func (s *session) sendLoop(oneByOne bool) {
	for {
		var req *pb.LeaseRequest
		select {
		case req = <-s.send:
		case <-s.closing:
			for {
				select {
				case req := <-s.send:
					if s.stream.Send(req) != nil {
						return
					}
				default:
					_ = s.stream.CloseSend()
					return
				}
			}
		case <-s.done:
			return
		}
		var next *pb.LeaseRequest
		if !oneByOne && plainAck(req) && s.opened.Load().GetAckBatches() {
			req, next = s.gatherAcks(req)
		}
		if s.stream.Send(req) != nil {
			return
		}
		if next != nil && s.stream.Send(next) != nil {
			return
		}
	}
}

// gatherAcks takes the plain acks waiting behind first; it returns them as one message,
// and the first request that is not one (nil if none). When none waits yet, it yields
// once to the handlers about to settle, so that acks finishing together share a message:
// with credit 200 that took a worker from ~8,900 to ~12,300 items/s against one server here,
// with no timer, and no wait when nothing else runs.
func (s *session) gatherAcks(first *pb.LeaseRequest) (*pb.LeaseRequest, *pb.LeaseRequest) {
	tokens := []string{first.GetAck().LeaseToken}
	if len(s.send) == 0 {
		runtime.Gosched()
	}
	for len(tokens) < maxAckBatch {
		select {
		case req := <-s.send:
			if !plainAck(req) {
				return batch(first, tokens), req
			}
			tokens = append(tokens, req.GetAck().LeaseToken)
		default:
			return batch(first, tokens), nil
		}
	}
	return batch(first, tokens), nil
}

func batch(first *pb.LeaseRequest, tokens []string) *pb.LeaseRequest {
	if len(tokens) == 1 {
		return first
	}
	return &pb.LeaseRequest{Kind: &pb.LeaseRequest_AckBatch{AckBatch: &pb.LeaseAckBatch{LeaseTokens: tokens}}}
}
