package httpserver

import (
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// How bodies are read. A body of up to SmallBodyBytes is read into pooled small blocks
// and copied into the request's own pooled buffer. A larger one first takes its size from
// the server's large-body budget (a chunked one, of unknown size, takes the whole body
// limit until its end shows its size), then is read into one buffer of its exact size (a
// known length) or into large blocks copied once into one such buffer at the end (a
// chunked body). The budget is given back when the request is done, after its response
// is written, since the handler may keep the body for the whole request (the gateway
// keeps it to replay on retries).
const (
	smallBlock = 64 << 10
	largeBlock = 1 << 20
	smallN     = SmallBodyBytes / smallBlock
)

var smallBlocks = sync.Pool{New: func() any { return new([smallBlock]byte) }}

var poolsOnce sync.Once

// limitPools keeps fasthttp from pooling request and response body buffers larger than
// SmallBodyBytes: without it one huge body would keep its buffer in fasthttp's pool (and
// the memory in the process) long after its request.
func limitPools() {
	poolsOnce.Do(func() { fasthttp.SetBodySizePoolLimit(SmallBodyBytes, SmallBodyBytes) })
}

// readBody reads ctx's streamed body into the request and reports whether it could; when
// not, the answer is set.
func (g *Guard) readBody(ctx *fasthttp.RequestCtx) bool {
	cl := ctx.Request.Header.ContentLength()
	if cl > g.maxBody {
		return g.fail(ctx, fasthttp.ErrBodyTooLarge)
	}
	r := ctx.RequestBodyStream()
	if cl > SmallBodyBytes {
		return g.readSized(ctx, r, cl)
	}
	var held [smallN]*[smallBlock]byte
	nb, total := 0, 0
	defer func() {
		for _, b := range held[:nb] {
			smallBlocks.Put(b)
		}
	}()
	for {
		if total > g.maxBody {
			return g.fail(ctx, fasthttp.ErrBodyTooLarge)
		}
		if total == nb*smallBlock {
			if nb == smallN {
				if g.maxBody > SmallBodyBytes {
					// A chunked body past SmallBodyBytes (a known length up to it ends first).
					return g.readUnsized(ctx, r, held[:], total)
				}
				// total is the limit: the body must end here.
				var one [1]byte
				if _, err := io.ReadFull(r, one[:]); err == nil {
					return g.fail(ctx, fasthttp.ErrBodyTooLarge)
				} else if err != io.EOF {
					return g.fail(ctx, err)
				}
				break
			}
			held[nb] = smallBlocks.Get().(*[smallBlock]byte) //nolint:forcetypeassert // the pool holds nothing else
			nb++
		}
		// Never read past the first byte over the limit.
		off := total - (nb-1)*smallBlock
		n, err := r.Read(held[nb-1][off : off+min(smallBlock-off, g.maxBody+1-total)])
		total += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return g.fail(ctx, err)
		}
	}
	// The stream is at its end, so the buffer its first bytes came from is free to
	// take the body.
	ctx.Request.SetBody(held[0][:min(total, smallBlock)])
	for i := 1; i < nb; i++ {
		ctx.Request.AppendBody(held[i][:min(total-i*smallBlock, smallBlock)])
	}
	if total == 0 && cl < 0 {
		ctx.Request.Header.SetContentLength(0)
	}
	return true
}

// readSized reads a large body of known length into one buffer of that size.
func (g *Guard) readSized(ctx *fasthttp.RequestCtx, r io.Reader, n int) bool {
	if !g.budget.acquire(n, g.bodyWait) {
		return g.fail(ctx, errBusy)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		g.budget.release(n)
		return g.fail(ctx, err)
	}
	ctx.Request.SetBodyRaw(buf)
	ctx.Request.SetUserValue(heldKey{}, &held{g: g, n: n})
	return true
}

// readUnsized goes on reading a chunked body whose first total bytes are in small.
func (g *Guard) readUnsized(ctx *fasthttp.RequestCtx, r io.Reader, small []*[smallBlock]byte, total int) bool {
	if !g.budget.acquire(g.maxBody, g.bodyWait) {
		return g.fail(ctx, errBusy)
	}
	var large [][]byte
	defer func() { g.budget.putBlocks(large) }()
	fill := largeBlock
	for {
		if fill == largeBlock {
			large = append(large, g.budget.getBlock())
			fill = 0
		}
		// Never read past the first byte over the limit.
		want := min(largeBlock-fill, g.maxBody+1-total)
		n, err := r.Read(large[len(large)-1][fill : fill+want])
		fill += n
		total += n
		if total > g.maxBody {
			g.budget.release(g.maxBody)
			return g.fail(ctx, fasthttp.ErrBodyTooLarge)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			g.budget.release(g.maxBody)
			return g.fail(ctx, err)
		}
	}
	buf := make([]byte, 0, total)
	for _, b := range small {
		buf = append(buf, b[:]...)
	}
	for i, b := range large {
		if i == len(large)-1 {
			b = b[:fill]
		}
		buf = append(buf, b...)
	}
	g.budget.release(g.maxBody - total)
	ctx.Request.SetBodyRaw(buf)
	ctx.Request.SetUserValue(heldKey{}, &held{g: g, n: total})
	return true
}

type heldKey struct{}

// held gives a request's share of the budget back when fasthttp resets the request
// (after its response is written, or when its connection ends).
type held struct {
	g *Guard
	n int
}

func (h *held) Close() error {
	if h.n > 0 {
		h.g.budget.release(h.n)
		h.n = 0
	}
	return nil
}

// idle runs when no large body holds memory: a moment later, unless large bodies are
// back, the spare large blocks are dropped and the memory handed back to the system.
func (g *Guard) idle() {
	if !g.releasePending.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(releaseDelay(), func() {
		g.releasePending.Store(false)
		if g.budget.dropBlocksIfIdle() {
			freeOSMemory()
		}
	})
}

// handBackEvery spaces the forced collections that hand memory back to the system.
const handBackEvery = 10 * time.Second

var lastHandBack atomic.Int64 // unix nanoseconds

func releaseDelay() time.Duration {
	next := time.Unix(0, lastHandBack.Load()).Add(handBackEvery)
	return max(time.Second, time.Until(next))
}

// freeOSMemory collects twice, so that buffers the last collection moved out of the
// pools (sync.Pool keeps them for one more cycle) are freed too, and returns the free
// memory to the system.
func freeOSMemory() {
	lastHandBack.Store(time.Now().UnixNano())
	runtime.GC()
	debug.FreeOSMemory()
}

// budget is the memory large bodies may hold at once, and the spare large blocks chunked
// bodies are read into. Requests wait for it first come, first served.
type budget struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiters []*waiter
	spare   [][]byte
	onIdle  func()
}

type waiter struct {
	n     int
	ready chan struct{}
}

func (b *budget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acquire takes n bytes, waiting up to wait for them.
func (b *budget) acquire(n int, wait time.Duration) bool {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
		return true
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
		return true
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted just now
		return true
	default:
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.grantLocked() // the first waiter leaving may let the next ones in
	return false
}

func (b *budget) release(n int) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	idle := b.used == 0
	b.mu.Unlock()
	if idle && b.onIdle != nil {
		b.onIdle()
	}
}

func (b *budget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.limit {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// getBlock returns a spare large block or a new one. The blocks in use never exceed
// what the budget allows, so the spares do not either.
func (b *budget) getBlock() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.spare); n > 0 {
		blk := b.spare[n-1]
		b.spare[n-1] = nil
		b.spare = b.spare[:n-1]
		return blk
	}
	return make([]byte, largeBlock)
}

func (b *budget) putBlocks(blocks [][]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, blk := range blocks {
		if (len(b.spare)+1)*largeBlock <= b.limit {
			b.spare = append(b.spare, blk)
		}
	}
}

// dropBlocksIfIdle drops the spare blocks when no large body holds memory, and reports
// whether it did.
func (b *budget) dropBlocksIfIdle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used != 0 {
		return false
	}
	b.spare = nil
	return true
}
