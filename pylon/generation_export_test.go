package pylon

import "strings"

// PanicOnAdmission makes p's generation actors panic on the admission of every request
// whose id starts with prefix (the stand-in for a bug in a generation's message
// handling); "" removes the fault.
func PanicOnAdmission(p *Pylon, prefix string) {
	if prefix == "" {
		p.genFault.Store(nil)
		return
	}
	h := faultHook(func(_ string, msg any) {
		if m, ok := msg.(*requestAdmitted); ok && strings.HasPrefix(m.id, prefix) {
			panic("injected fault on " + m.id)
		}
	})
	p.genFault.Store(&h)
}
