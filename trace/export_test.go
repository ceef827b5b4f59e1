package trace

// Validations returns how many times Validate has run, for the tests that
// check that a trace is validated once however many analyses run on it.
func Validations() int64 { return validations.Load() }
