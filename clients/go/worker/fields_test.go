package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "switchyard/clients/go/switchyardpb"
)

// The by-name field access works on fields the stubs have, and does nothing on those they lack.
func TestFieldsByName(t *testing.T) {
	rr := &pb.RetryRequest{}
	setString(rr, "lease_token", "r.1")
	setString(rr, "no_such_field", "x")
	if rr.LeaseToken != "r.1" {
		t.Fatalf("lease_token %q", rr.LeaseToken)
	}
	if getString(&pb.Delivery{Id: "a"}, "id") != "a" || getString(&pb.Delivery{}, "no_such_field") != "" {
		t.Fatal("getString")
	}
	opened := &pb.LeaseOpened{}
	if _, ok := getDuration(opened, "heartbeat_interval"); ok {
		t.Fatal("an unset duration reads as set")
	}
	setDuration(opened, "heartbeat_interval", 1500*time.Millisecond)
	if d, ok := getDuration(opened, "heartbeat_interval"); !ok || d != 1500*time.Millisecond {
		t.Fatalf("heartbeat_interval %v %v", d, ok)
	}
	if opened.HeartbeatInterval.AsDuration() != 1500*time.Millisecond || !sameDuration(opened.HeartbeatInterval, durationpb.New(1500*time.Millisecond)) {
		t.Fatal("setDuration")
	}
	setDuration(opened, "ack_batches", time.Second) // not a Duration: left alone
	if got := reason(errors.New(strings.Repeat("x", 1500))); len(got) != 1000 {
		t.Fatalf("reason of %d characters", len(got))
	}
}

func sameDuration(a, b *durationpb.Duration) bool {
	return a.Seconds == b.Seconds && a.Nanos == b.Nanos
}
