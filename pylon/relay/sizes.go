package relay

// Connection caps and buffer sizes of the gateway's and the pylon's HTTP clients and
// servers, chosen for memory per open stream: a stream holds one client connection and
// one upstream connection in each proxy for as long as the engine generates, so every
// buffer such a pair keeps is multiplied by the streams open at once (bin/bench streams
// measures it; docs/perf has the figures).

// upstreamConnSpare is the connections to one upstream allowed beyond one per client
// connection: the gateway's health probes, the pylon's canaries and calibration.
const upstreamConnSpare = 64

// UpstreamConnCap is a proxy's cap on its connections to one upstream (a HostClient's
// MaxConns) given its data listener's cap on client connections (maxClientConns as
// httpserver.Limits.MaxConnections after WithDefaults; < 0: none). A client connection
// holds at most one upstream connection at a time, so the client cap bounds the upstream
// connections too; a smaller upstream cap would make the streams past it wait for a free
// connection, then fail, while the listener still accepts them.
func UpstreamConnCap(maxClientConns int) int {
	if maxClientConns <= 0 {
		return 1 << 20
	}
	return maxClientConns + upstreamConnSpare
}

// ClientWriteBuffer is the pylon's write buffer per gateway connection, held for as long
// as a relayed stream lasts (each event is written and flushed through it): it holds an
// answer's headers and a typical event or small answer in one write; larger bodies are
// written around it.
const ClientWriteBuffer = 2 << 10

// EngineReadBuffer is the pylon's read buffer per engine connection, held for as long as a
// relayed stream lasts. It must hold the engine's response headers (a few hundred bytes
// from vLLM, SGLang or the mock engine); larger reads of a body go around it.
const EngineReadBuffer = 2 << 10
