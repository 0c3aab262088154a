package prereq

import (
	"fmt"
	"runtime"
	"testing"
)

// Outcome is what a prerequisite check did to the test it was given.
type Outcome struct {
	// Fatal is the failure message, "" if the check let the test go on.
	Fatal string
	// Skipped reports that the check tried to skip the test. No check may: a test of a
	// check asserts it is false, so a skip that crept in fails that test.
	Skipped bool
}

// Observe runs check with a testing.TB that records Fatal and Skip instead of ending the
// calling test, so the failure path of a check (Tool, Command, testenv.Assets) can itself be
// tested. Like the real ones, the recorded calls end check's goroutine.
func Observe(check func(testing.TB)) Outcome {
	rec := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(rec)
	}()
	<-done
	return rec.out
}

// recorder is a testing.TB whose Fatal and Skip calls are recorded.
type recorder struct {
	testing.TB // nil: calling anything not overridden panics, which is a test bug
	out        Outcome
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.out.Fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.out.Fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

// The skip methods exist only to catch a check that skips; see Outcome.Skipped.
func (r *recorder) Skip(...any)          { r.out.Skipped = true; runtime.Goexit() }
func (r *recorder) Skipf(string, ...any) { r.out.Skipped = true; runtime.Goexit() }
func (r *recorder) SkipNow()             { r.out.Skipped = true; runtime.Goexit() }
