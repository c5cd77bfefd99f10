package lb

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Hash inputs use the reference's tagged encoding so that our seeded hashes agree with
// Stargate's byte for byte: a version byte 0x01, then per field the ASCII tag, one 0xFF
// byte, the value length as a little-endian u64 and the value bytes.
const hashVersion = 0x01

// appendTagged appends one tagged field to b.
func appendTagged(b []byte, tag, value string) []byte {
	b = append(b, tag...)
	b = append(b, 0xFF)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	return append(b, value...)
}

// appendTaggedUint64 appends one tagged field whose value is v as 8 little-endian bytes.
func appendTaggedUint64(b []byte, tag string, v uint64) []byte {
	b = append(b, tag...)
	b = append(b, 0xFF)
	b = binary.LittleEndian.AppendUint64(b, 8)
	return binary.LittleEndian.AppendUint64(b, v)
}

// appendPrefix appends the hash prefix shared by the ring and rendezvous hashes.
func appendPrefix(b []byte, seed, routingKey, model string) []byte {
	b = append(b, hashVersion)
	b = appendTagged(b, "seed", seed)
	b = appendTagged(b, "routing_key", routingKey)
	return appendTagged(b, "model_id", model)
}

// hashKey is xxh3-64 of prefix ‖ tagged cache_affinity_key, using buf as scratch.
func hashKey(buf *[]byte, prefix []byte, key string) uint64 {
	b := (*buf)[:0]
	b = append(b, prefix...)
	b = appendTagged(b, "cache_affinity_key", key)
	*buf = b
	return xxh3.Hash(b)
}
