package certtrust

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
)

// ServedPath is where every webhook replica answers GET with the certificate chain it
// presents in TLS handshakes. widgetctl status reads it through the apiserver's pod proxy:
// the proxy does not show the certificate of its own TLS connection, and on call has no route
// to the pods. The chain is what every TLS client of the port sees anyway.
const ServedPath = "/servingcert"

// Served is ServedPath's answer.
type Served struct {
	// Chain is the PEM chain presented now (leaf first); empty while none is loaded.
	Chain string `json:"chain"`
	// Held is a renewed chain on disk that the reload gate holds back because a caBundle
	// does not trust it yet.
	Held string `json:"held,omitempty"`
}

// ServedHandler answers GET with the chains current and held return (either may be nil).
func ServedHandler(current, held func() *tls.Certificate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Served{Chain: chainPEM(current()), Held: chainPEM(held())})
	})
}

func chainPEM(c *tls.Certificate) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	for _, der := range c.Certificate {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	return b.String()
}
