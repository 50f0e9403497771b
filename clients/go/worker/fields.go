package worker

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Fields the API gained after these stubs may have been generated (RetryRequest.reason
// and .delay, DropRequest.reason, Delivery.last_error, LeaseOpened.min_idle) are read and
// written by name, so the worker uses them as soon as the stubs are regenerated from a
// proto that has them, and leaves them out before.

func field(m proto.Message, name string) (protoreflect.Message, protoreflect.FieldDescriptor) {
	r := m.ProtoReflect()
	return r, r.Descriptor().Fields().ByName(protoreflect.Name(name))
}

// setString sets string field name of m, if m has one and v is not empty.
func setString(m proto.Message, name, v string) {
	if r, f := field(m, name); f != nil && f.Kind() == protoreflect.StringKind && v != "" {
		r.Set(f, protoreflect.ValueOfString(v))
	}
}

// setDuration sets Duration field name of m, if m has one and d is positive.
func setDuration(m proto.Message, name string, d time.Duration) {
	if r, f := field(m, name); f != nil && f.Message() != nil && f.Message().FullName() == "google.protobuf.Duration" && d > 0 {
		r.Set(f, protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect()))
	}
}

// getString reads string field name of m ("" when m has none).
func getString(m proto.Message, name string) string {
	if r, f := field(m, name); f != nil && f.Kind() == protoreflect.StringKind {
		return r.Get(f).String()
	}
	return ""
}

// getDuration reads Duration field name of m; false when m has none or it is unset.
func getDuration(m proto.Message, name string) (time.Duration, bool) {
	r, f := field(m, name)
	if f == nil || f.Message() == nil || f.Message().FullName() != "google.protobuf.Duration" || !r.Has(f) {
		return 0, false
	}
	d := r.Get(f).Message()
	fields := d.Descriptor().Fields()
	seconds := d.Get(fields.ByName("seconds")).Int()
	nanos := d.Get(fields.ByName("nanos")).Int()
	return time.Duration(seconds)*time.Second + time.Duration(nanos), true
}

// reason is what a failed handler's error says, cut to the 1,000 characters the server keeps.
func reason(err error) string {
	s := err.Error()
	if len(s) > 1000 {
		s = s[:1000]
	}
	return s
}
