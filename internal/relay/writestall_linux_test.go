package relay_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/relay"
)

// stalledPair is rawPair with the server side's writes bounded by stall.
func stalledPair(t *testing.T, stall time.Duration) (client, server net.Conn) {
	t.Helper()
	client, server = rawPair(t)
	if got := relay.BoundWrites(server, stall); got != server {
		t.Fatalf("BoundWrites wrapped a raw connection (%T): it should arm it in place", got)
	}
	return client, server
}

// A peer that stops reading fails a write that fills the socket buffers with a timeout,
// once the stall bound has passed without progress.
func TestWriteStallFailsAPeerThatStopsReading(t *testing.T) {
	t.Parallel()
	_, server := stalledPair(t, 100*time.Millisecond)
	wrote := make(chan error, 1)
	go func() {
		_, err := server.Write(make([]byte, 64<<20)) // far more than both sockets buffer
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write to a peer that never reads: %v, want a timeout", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "write" {
			t.Errorf("write error %#v, want a write *net.OpError", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a write to a peer that never reads is still blocked after 20 s (stall bound 100 ms)")
	}
}

// A peer that reads steadily but slowly is never cut, though the whole write takes several
// times the stall bound (the deadline is re-armed after each bit of progress), and the
// deadline is cleared once the write is done: a later write is not failed by it.
func TestWriteStallKeepsASlowReader(t *testing.T) {
	t.Parallel()
	const stall = time.Second
	client, server := stalledPair(t, stall)
	const size = 24 << 20
	read := make(chan int, 1)
	go func() {
		buf := make([]byte, 64<<10)
		total := 0
		for total < size {
			n, err := client.Read(buf)
			total += n
			if err != nil {
				break
			}
			time.Sleep(8 * time.Millisecond) // 64 KiB per 8 ms: 24 MiB take about 3 s
		}
		read <- total
		_, _ = io.Copy(io.Discard, client)
	}()
	start := time.Now()
	if n, err := server.Write(make([]byte, size)); err != nil || n != size {
		t.Fatalf("write to a slow reader: %d of %d bytes, %v", n, size, err)
	}
	took := time.Since(start)
	if got := <-read; got != size {
		t.Fatalf("the reader got %d bytes, want %d", got, size)
	}
	if took <= stall {
		t.Logf("the write took %v, not more than the stall bound: the reader was not slow enough to show re-arming", took)
	}
	time.Sleep(stall + 100*time.Millisecond) // past any deadline the write armed
	if _, err := server.Write([]byte("after")); err != nil {
		t.Errorf("a write after a completed stalled write: %v (its deadline was not cleared)", err)
	}
}

// A write that never waits arms nothing: writes to a reading peer succeed and leave no
// deadline behind, and 0 turns the bound off (the connection is returned as it is).
func TestWriteStallOffAndUnarmed(t *testing.T) {
	t.Parallel()
	client, server := stalledPair(t, 50*time.Millisecond)
	for range 3 {
		if _, err := server.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(client, got); err != nil || string(got) != "ping" {
			t.Fatalf("read %q, %v", got, err)
		}
		time.Sleep(60 * time.Millisecond) // past the bound: an armed deadline would fail the next write
	}
	if got := relay.BoundWrites(server, 0); got != server {
		t.Errorf("BoundWrites(c, 0) = %T, want c itself", got)
	}
}
