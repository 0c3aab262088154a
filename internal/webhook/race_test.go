//go:build race

package webhook

// raceEnabled: under the race detector the heap is the detector's too, so the memory tests'
// figures mean nothing; the unit tier runs them once more without -race.
const raceEnabled = true
