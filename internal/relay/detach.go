package relay

import (
	"errors"
	"io"
	"reflect"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// ErrStreamDetach says the running fasthttp has no body stream field where
// DetachBodyStream looks for it; callers then hand the stream over as it is.
var ErrStreamDetach = errors.New("fasthttp.Response has no bodyStream io.Reader field")

// bodyStreamOffset is the offset of fasthttp.Response's body stream field (-1: not found).
// fasthttp has no call that takes a response's body stream without closing it, and the
// gateway and the pylon read an upstream answer straight into the response they send on
// (no header copy); DetachBodyStream takes the stream out so that a wrapper around it can
// take its place. TestBodyStreamDetach fails when an upgrade moves the field.
var bodyStreamOffset = func() uintptr {
	f, ok := reflect.TypeFor[fasthttp.Response]().FieldByName("bodyStream")
	if !ok || f.Type != reflect.TypeFor[io.Reader]() {
		return ^uintptr(0)
	}
	return f.Offset
}()

// DetachSupported reports ErrStreamDetach when the running fasthttp has no body stream
// field where DetachBodyStream looks for it, for a server to say so once at start-up.
func DetachSupported() error {
	if bodyStreamOffset == ^uintptr(0) {
		return ErrStreamDetach
	}
	return nil
}

// DetachBodyStream removes resp's body stream without closing it and returns it (nil when
// resp has none).
func DetachBodyStream(resp *fasthttp.Response) (io.Reader, error) {
	if bodyStreamOffset == ^uintptr(0) {
		return nil, ErrStreamDetach
	}
	p := (*io.Reader)(unsafe.Add(unsafe.Pointer(resp), bodyStreamOffset)) // the field's offset and type were checked
	r := *p
	*p = nil
	return r, nil
}
