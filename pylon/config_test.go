package pylon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/pylon"
)

// --engine-slot-share needs the admission rule that enforces it.
func TestSlotShareNeedsFreeSlotRule(t *testing.T) {
	for _, tc := range []struct {
		share             uint64
		enabled, free, ok bool
	}{
		{0, false, false, true}, {6, true, true, true}, {6, true, false, false}, {6, false, true, false},
	} {
		cfg := pylon.DefaultConfig()
		cfg.UpstreamBaseURL = "http://engine:80"
		cfg.Admission.SlotShare, cfg.Admission.Enabled, cfg.Admission.RequireFreeSlot = tc.share, tc.enabled, tc.free
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("share %d, admission %v, free-slot rule %v: %v, want ok=%v", tc.share, tc.enabled, tc.free, err, tc.ok)
		}
	}
}

// A negative wait is refused.
func TestSlotShareWaitNotNegative(t *testing.T) {
	cfg := pylon.DefaultConfig()
	cfg.UpstreamBaseURL = "http://engine:80"
	cfg.Admission.SlotShareWait = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "engine-slot-share-wait") {
		t.Errorf("a negative wait: %v, want an error naming engine-slot-share-wait", err)
	}
}
