package worker

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestASettleResultsReasonReadsAsAUnaryCallsWould(t *testing.T) {
	err := settleError(codes.FailedPrecondition, "lease 7 was superseded", "LEASE_SUPERSEDED")
	if status.Code(err) != codes.FailedPrecondition || Reason(err) != "LEASE_SUPERSEDED" {
		t.Fatalf("got %v with reason %q", err, Reason(err))
	}
	if got := Reason(settleError(codes.Unavailable, "no reason from an older server", "")); got != "" {
		t.Fatalf("reason %q from a result without one", got)
	}
	if got := Reason(errors.New("not a status")); got != "" {
		t.Fatalf("reason %q of a plain error", got)
	}
}
