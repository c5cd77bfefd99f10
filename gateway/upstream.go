package gateway

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// headersConn is an upstream connection whose read deadline covers only the wait for the
// first bytes of a response. fasthttp's DoTimeout sets a read deadline before reading the
// response and leaves it on the connection while a streamed body is relayed, which would
// cut every stream that outlives --proxy-request-timeout-ms (REFERENCE.md §3.6: the timeout
// applies until the response headers arrive, then the stream runs unbounded). The first
// successful read clears the deadline. A connection is used by one request at a time (the
// pool hands it over under a lock), so armed needs no synchronisation of its own.
type headersConn struct {
	net.Conn
	armed bool
}

func (c *headersConn) SetReadDeadline(t time.Time) error {
	c.armed = !t.IsZero()
	return c.Conn.SetReadDeadline(t)
}

func (c *headersConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.armed {
		c.armed = false
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
	return n, err
}

// headersTimeoutDial wraps dial (nil: fasthttp's TCP dialer) so every upstream connection
// is a headersConn.
func headersTimeoutDial(dial fasthttp.DialFunc) fasthttp.DialFunc {
	if dial == nil {
		dial = fasthttp.Dial
	}
	return func(addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return &headersConn{Conn: c}, nil
	}
}
