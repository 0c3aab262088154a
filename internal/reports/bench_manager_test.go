package reports

import (
	"strings"
	"testing"
)

const managerRun = `goos: linux
BenchmarkManagerAtScale-2   	       1	812345678901 ns/op	        10000 widgets	        41.0 rss-idle-MiB	        98.2 rss-created-MiB	       131.5 rss-peak-MiB	       120.1 rss-reconciled-MiB	       %s rss-settled-MiB	       655.0 settled-s	        55.3 heap-live-MiB	       119.0 rss-after-load-MiB	       612.0 reconciled-s	         0.61 p50-ms	         %s p99-ms	        12.3 max-ms
PASS
`

// The manager's one run renders every figure, its two targets in bold when met and marked
// when missed; a run that does not say its size is refused.
func TestManagerTable(t *testing.T) {
	render := func(settled, p99 string) (string, error) {
		res, err := ParseBench(strings.NewReader(strings.Replace(strings.Replace(managerRun, "%s", settled, 1), "%s", p99, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return ManagerTable(res)
	}
	got, err := render("118.4", "2.10")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10000 Widgets", "1 run", "| … once settled (below 5% of a core) | **118 MiB** | ≤ 150 MiB |", "| … p99 | **2.10 ms** | ≤ 5 ms |", "| every Widget reconciled after the first create | 612 s |  |"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered\n%s\nwant it to contain %q", got, want)
		}
	}
	got, err = render("151.0", "5.01")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 151 MiB (missed) |", "| 5.01 ms (missed) |"} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered\n%s\nwant it to contain %q", got, want)
		}
	}
	res, _ := ParseBench(strings.NewReader(strings.Replace(managerRun, "10000 widgets", "", 1)))
	if _, err := ManagerTable(res); err == nil {
		t.Error("a run without its number of Widgets rendered")
	}
	if _, err := ManagerTable(nil); err == nil {
		t.Error("no results rendered")
	}
}
