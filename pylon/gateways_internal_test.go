package pylon

import (
	"strconv"
	"testing"
)

// A gateway's state is found by id (also through a view of a request buffer), its seq
// only rises, and the table stops growing at maxGateways.
func TestGatewayTable(t *testing.T) {
	var gws gatewayTable
	if gws.get("gw-a") != nil {
		t.Fatal("unknown gateway found")
	}
	buf := []byte("gw-a")
	a := gws.add(string(buf))
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
		if gws.add("gw-"+strconv.Itoa(i)) == nil {
			t.Fatalf("gateway %d refused below the bound", i)
		}
	}
	if gws.add("one-too-many") != nil {
		t.Error("the table grew past maxGateways")
	}
	if gws.add("gw-a") != a {
		t.Error("a known gateway refused once the table is full")
	}
}
