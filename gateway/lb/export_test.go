package lb

import "github.com/zeebo/xxh3"

// AffinityGroup exposes a wait-and-widen balancer's affinity group for r on s.
func AffinityGroup(b Balancer, s *Snapshot, r *Request) []int32 {
	return b.(*waitAndWiden).group(s, r)
}

// CachedKeyBytes is the total length of the keys a balancer's key cache holds.
func CachedKeyBytes(b Balancer) int {
	switch b := b.(type) {
	case *waitAndWiden:
		return b.groups.keyBytes()
	case *pulsar:
		return b.ranker.cache.keyBytes()
	case *pulsarWaitAndWiden:
		return b.ranker.cache.keyBytes()
	default:
		return 0
	}
}

// RendezvousHash is the pulsar hash of (seed, routing key, model, key, cluster).
func RendezvousHash(seed, routingKey, model, key, cluster string) uint64 {
	b := appendPrefix(nil, seed, routingKey, model)
	b = appendTagged(b, "cache_affinity_key", key)
	return xxh3.Hash(appendTagged(b, "cluster_id", cluster))
}

// RingPointHash is the hash of one ring point.
func RingPointHash(seed, routingKey, model, cluster string, virtualNode uint64) uint64 {
	b := appendPrefix(nil, seed, routingKey, model)
	b = appendTagged(b, "cluster_id", cluster)
	return xxh3.Hash(appendTaggedUint64(b, "virtual_node", virtualNode))
}

// PulsarRanking is the rendezvous ranking (candidate indices, best first) a pulsar or
// pulsar-wait-and-widen balancer gives key on s; a copy.
func PulsarRanking(b Balancer, s *Snapshot, key string) []int32 {
	var k *ranker
	switch b := b.(type) {
	case *pulsar:
		k = &b.ranker
	case *pulsarWaitAndWiden:
		k = &b.ranker
	default:
		return nil
	}
	return append([]int32(nil), k.rank(s, key)...)
}
