// Package rawhttp sends hand-written HTTP/1.1 requests in tests and builds the malformed
// requests that the gateway's, the pylon's and the mock engine's hygiene tests share.
package rawhttp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Marker stands for request bytes that must never come back in an answer.
const Marker = "EVIL<script>"

// big is 100 KB of filler, over any server's header size limit.
var big = strings.Repeat("a", 100<<10)

// Send writes req on a new connection from dial and reads the answer.
func Send(tb testing.TB, dial func() (net.Conn, error), req string) *fasthttp.Response {
	tb.Helper()
	conn, err := dial()
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(req)); err != nil {
		tb.Fatal(err)
	}
	resp := &fasthttp.Response{}
	if err := resp.Read(bufio.NewReader(conn)); err != nil {
		tb.Fatalf("reading the answer to %.60q: %v", req, err)
	}
	return resp
}

// ExpectClosed reads conn until the server closes it: it fails when server (named in the
// message) keeps the connection open for 20 s, or closes it having sent nothing at all.
func ExpectClosed(tb testing.TB, conn net.Conn, server string) {
	tb.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		tb.Fatalf("the %s kept the connection open after giving up on it (read %d bytes)", server, n)
	}
	if n == 0 {
		tb.Error("the client got nothing at all: the stream was not started")
	}
}

// HugeHeader is a GET of path to host with a 100 KB header holding Marker.
func HugeHeader(host, path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nX-Big: " + Marker + big + "\r\n\r\n"
}

// HugeRequestLine is a GET to host whose request line is 100 KB long and holds Marker.
func HugeRequestLine(host string) string {
	return "GET /" + Marker + big + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
}

// LineWithoutSpaces is a request to host whose request line is Marker alone.
func LineWithoutSpaces(host string) string {
	return Marker + "\r\nHost: " + host + "\r\n\r\n"
}

// HeaderWithoutColon is a GET of path to host with a header line that is Marker alone.
func HeaderWithoutColon(host, path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + Marker + "\r\n\r\n"
}

// BadContentLength is a POST to path on host whose Content-Length is Marker.
func BadContentLength(host, path string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + Marker + "\r\n\r\n"
}

// LongBody is a POST to path on host with a body of n bytes.
func LongBody(host, path string, n int) string {
	return "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n" + strings.Repeat("x", n)
}
