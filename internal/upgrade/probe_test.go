package upgrade

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProbeBuildConversion: this build's conversion passes both round trips; a build that
// drops a field only v1 can express (spec.paused) on the way back is caught.
func TestProbeBuildConversion(t *testing.T) {
	cfg := WidgetConfig()
	if err := ProbeBuildConversion(t.Context(), cfg, "widgetry.io", "Widget"); err != nil {
		t.Fatalf("this build: %v", err)
	}
	good := cfg.BuildConverter
	cfg.BuildConverter = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		good.ServeHTTP(rec, r)
		body, _ := io.ReadAll(rec.Result().Body)
		// A lossy build: the conversion-data annotation never makes it back.
		body = bytes.ReplaceAll(body, []byte(`"widgetry.io/conversion-data"`), []byte(`"widgetry.io/dropped"`))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
	err := ProbeBuildConversion(t.Context(), cfg, "widgetry.io", "Widget")
	if err == nil || !strings.Contains(err.Error(), "lost data in a round trip v1 -> v1alpha1 -> v1") {
		t.Fatalf("a lossy build: %v", err)
	}
}
