package pylon

import (
	"strconv"
	"testing"
	"time"
)

// A gateway's state is found by id (also through a view of a request buffer), its seq
// only rises, and the table stops growing at maxGateways.
func TestGatewayTable(t *testing.T) {
	var gws gatewayTable
	if gws.get("gw-a") != nil {
		t.Fatal("unknown gateway found")
	}
	buf := []byte("gw-a")
	a := gws.add(string(buf), 0)
	buf[0] = 'X' // add copied the id
	if got := gws.get("gw-a"); got != a || a.id != "gw-a" {
		t.Fatalf("get after add: %p (id %q), want %p", got, a.id, a)
	}
	a.note(5)
	a.note(3)
	if s := a.seq.Load(); s != 5 {
		t.Errorf("seq %d after 5 then 3, want 5", s)
	}
	for i := 1; i < maxGateways; i++ {
		if gws.add("gw-"+strconv.Itoa(i), 0) == nil {
			t.Fatalf("gateway %d refused below the bound", i)
		}
	}
	if gws.add("one-too-many", int64(time.Minute)) != nil {
		t.Error("the table grew past maxGateways")
	}
	if gws.add("gw-a", int64(time.Minute)) != a {
		t.Error("a known gateway refused once the table is full")
	}
}

// Once the table is full, a new gateway takes the places of those that dispatched nothing
// for gatewayIdle; a gateway that still dispatches keeps its state.
func TestGatewayTableMakesRoomForNewGateways(t *testing.T) {
	var gws gatewayTable
	for i := range maxGateways {
		gws.add("old-"+strconv.Itoa(i), 0)
	}
	live := gws.add("old-0", int64(gatewayIdle-time.Minute)) // still dispatching
	live.note(7)
	if gws.add("new", int64(gatewayIdle-time.Second)) != nil {
		t.Fatal("a new gateway took a place before any was idle for gatewayIdle")
	}
	if n := testing.AllocsPerRun(100, func() { gws.add("made-up", int64(gatewayIdle-time.Second)) }); n != 0 {
		t.Errorf("refusing a new gateway allocates %v times, want 0", n)
	}
	n := gws.add("new", int64(gatewayIdle))
	if n == nil {
		t.Fatal("a new gateway refused with every other gateway but one idle for gatewayIdle")
	}
	if gws.get("old-1") != nil {
		t.Error("an idle gateway kept its place")
	}
	if got := gws.get("old-0"); got != live || got.seq.Load() != 7 {
		t.Errorf("the gateway still dispatching lost its state: %p (seq %d), want %p", got, got.seq.Load(), live)
	}
	if got := len(*gws.m.Load()); got != 2 {
		t.Errorf("%d gateways in the table, want 2 (the live one and the new one)", got)
	}
}
