package worker

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is google.rpc.ErrorInfo.domain of every error Switchyard sends.
const ErrorDomain = "switchyard.v1"

// Reason is why a call failed, as Switchyard says it: the reason of the status's
// google.rpc.ErrorInfo, an ErrorReason name without its prefix (errors.proto), e.g.
// "QUEUE_NOT_FOUND" or "LEASE_SUPERSEDED"; "" when the error carries none (a status
// made by gRPC itself, such as DEADLINE_EXCEEDED, or by a proxy). Branch on it, not
// on the message.
func Reason(err error) string {
	s, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return info.Reason
		}
	}
	return ""
}

// settleError is the error a failed settle result stands for: its status, with the
// result's reason (SettleResult.reason) as ErrorInfo, so Reason reads it as it would a
// unary settle's.
func settleError(code codes.Code, message, reason string) error {
	s := status.New(code, message)
	if reason == "" {
		return s.Err()
	}
	if withInfo, err := s.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		s = withInfo
	}
	return s.Err()
}
