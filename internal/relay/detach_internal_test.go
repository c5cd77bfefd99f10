package relay

import (
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) CloseWithError(error) error {
	c.closed++
	return nil
}

// DetachBodyStream finds fasthttp.Response's body stream field (an upgrade that moves it
// fails here, not silently in production) and takes the stream out without closing it.
func TestBodyStreamDetach(t *testing.T) {
	if err := DetachSupported(); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	bs := &closeCounter{Reader: strings.NewReader("data: x\n\n")}
	resp.SetBodyStream(bs, -1)
	r, err := DetachBodyStream(&resp)
	if err != nil || r != bs {
		t.Fatalf("detached %v, %v", r, err)
	}
	if resp.IsBodyStream() {
		t.Error("the response still has a body stream")
	}
	resp.SetBodyStream(strings.NewReader(""), -1)
	resp.Reset()
	if bs.closed != 0 {
		t.Errorf("the detached stream was closed %d times", bs.closed)
	}
}
