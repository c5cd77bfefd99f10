package actors_test

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/actors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAlarmDeliversEarliestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actors.NewSystem(slog.New(slog.DiscardHandler))
		probe := newProbe(sys, 4)
		start := time.Now()
		a := actors.NewAlarm(sys.Root, probe.pid)
		a.Arm(start, start.Add(100*time.Millisecond))
		a.Arm(start, start.Add(30*time.Millisecond)) // earlier wins
		a.Arm(start, start.Add(60*time.Millisecond)) // later is ignored while armed
		if _, ok := (<-probe.c).(actors.Tick); !ok {
			t.Fatal("expected a Tick")
		}
		if got := time.Since(start); got != 30*time.Millisecond {
			t.Errorf("tick after %v, want 30ms", got)
		}
		a.Fired()
		a.Arm(time.Now(), time.Now().Add(10*time.Millisecond))
		<-probe.c
		if got := time.Since(start); got != 40*time.Millisecond {
			t.Errorf("second tick after %v, want 40ms", got)
		}
		a.Fired()
		a.Arm(time.Now(), time.Now().Add(time.Second))
		a.Stop()
		time.Sleep(2 * time.Second)
		select {
		case m := <-probe.c:
			t.Errorf("stopped alarm delivered %v", m)
		default:
		}
		sys.Root.Stop(probe.pid)
		time.Sleep(time.Second)
		synctest.Wait()
	})
}

// Every calls its function each period (the first one period from now) and returns once
// the context ends.
func TestEveryCallsEachPeriodUntilCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var calls []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			actors.Every(ctx, 10*time.Millisecond, func() { calls = append(calls, time.Since(start)) })
		}()
		time.Sleep(35 * time.Millisecond)
		cancel()
		<-done
		want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}
		if len(calls) != len(want) {
			t.Fatalf("calls at %v, want %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Fatalf("calls at %v, want %v", calls, want)
			}
		}
	})
}

// A kick calls f at once, between the period's ticks, which stay where they were.
func TestEveryOrKickedCallsOnAKick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		kick := make(chan struct{}, 1)
		calls := make(chan time.Duration, 8)
		done := make(chan struct{})
		go func() {
			defer close(done)
			actors.EveryOrKicked(ctx, 10*time.Millisecond, kick, func() { calls <- time.Since(start) })
		}()
		time.Sleep(15 * time.Millisecond)
		kick <- struct{}{}
		time.Sleep(10 * time.Millisecond)
		cancel()
		<-done
		close(calls)
		var got []time.Duration
		for c := range calls {
			got = append(got, c)
		}
		want := []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("calls at %v, want %v", got, want)
		}
	})
}
