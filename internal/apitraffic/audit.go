package apitraffic

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// auditEvent is the part of an audit.k8s.io/v1 Event the client count reads (the apiserver's
// audit log backend writes one JSON event per line).
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource   string `json:"resource"`
		APIGroup   string `json:"apiGroup"`
		APIVersion string `json:"apiVersion"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// Clients are the requests for a resource version by client (user and user agent), by verb.
type Clients map[string]map[string]int

// String lists the clients, busiest first, at most five, e.g. `system:serviceaccount:shop:app
// (app/v2) get 3, list 1`.
func (c Clients) String() string {
	total := func(k string) int {
		n := 0
		for _, v := range c[k] {
			n += v
		}
		return n
	}
	keys := slices.SortedFunc(maps.Keys(c), func(a, b string) int {
		if d := total(b) - total(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys[:min(5, len(keys))] {
		var verbs []string
		for _, v := range slices.Sorted(maps.Keys(c[k])) {
			verbs = append(verbs, v+" "+strconv.Itoa(c[k][v]))
		}
		parts = append(parts, k+" "+strings.Join(verbs, ", "))
	}
	if len(keys) > 5 {
		parts = append(parts, fmt.Sprintf("and %d more", len(keys)-5))
	}
	return strings.Join(parts, "; ")
}

// AuditClients counts, in a kube-apiserver audit log (JSON lines, level Metadata or more for
// the resource), the requests for r received since, by client. Each request counts once (its
// ResponseComplete or Panic event); lines that are not audit events are skipped.
func AuditClients(path string, r Resource, since time.Time) (Clients, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	defer f.Close()
	clients := Clients{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.ObjectRef == nil {
			continue
		}
		if (e.Stage != "ResponseComplete" && e.Stage != "Panic") || e.RequestReceivedTimestamp.Before(since) ||
			e.ObjectRef.APIGroup != r.Group || e.ObjectRef.APIVersion != r.Version || e.ObjectRef.Resource != r.Resource {
			continue
		}
		k := e.User.Username + " (" + e.UserAgent + ")"
		if clients[k] == nil {
			clients[k] = map[string]int{}
		}
		clients[k][e.Verb]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the audit log: %w", err)
	}
	return clients, nil
}
