package dispatch

// StateRequestForTest is the message that asks a scheduler for its State.
func StateRequestForTest() any { return stateRequest{} }
