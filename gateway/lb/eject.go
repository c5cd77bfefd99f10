package lb

// EjectionAllowance is how many of ejected backends may stay out of a target's candidates
// when it has routable backends in all and at most pct percent of them may be out at once:
// all of them when pct is 0 or 100 and more, else never more than pct percent of routable,
// but always at least one.
func EjectionAllowance(ejected, routable, pct int) int {
	if pct <= 0 || pct >= 100 {
		return ejected
	}
	return min(ejected, max(1, routable*pct/100))
}
