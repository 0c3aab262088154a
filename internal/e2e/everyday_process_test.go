//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
	"github.com/widgetry/widget-operator/internal/testenv/widgetenv"
)

// everydayEnv, set in this test binary's environment, makes it the everyday load's process
// (TestMain): it reads an everydaySpec from the variable, sends the load until its standard
// input closes and writes the LoadResult to its standard output as JSON.
const everydayEnv = "WIDGET_E2E_EVERYDAY_LOAD"

// everydaySpec is what the everyday load's process sends, and where.
type everydaySpec struct {
	// NetNS is the cluster's network namespace, where the process dials.
	NetNS string
	// CA is the serving certificate's CA (PEM) and ServerName the name it is verified for.
	CA         []byte
	ServerName string
	Targets    []string
	Rate       int
}

// apiserverIdleConnsPerHost is the idle connections per host that the apiserver's webhook
// clients keep (k8s.io/client-go/transport's idleConnsPerHost).
const apiserverIdleConnsPerHost = 25

// everydayWarmConns are the connections the everyday load opens to each pod before the
// attacks: more than a second of its requests to one pod (10 at 20 a second over two pods),
// fewer than the apiserver's webhook client keeps idle. Without them the load's first slow answers make it dial, and it
// would measure its own handshakes queued in the pods' accept backlogs behind the attacker's
// hundreds, which the apiserver, its connections long open, does not wait for.
const everydayWarmConns = 16

// startEveryday runs the everyday load in a process of its own (this test binary again) until
// ctx ends, and returns what it saw.
func startEveryday(ctx context.Context, spec everydaySpec) (*widgetenv.LoadResult, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), everydayEnv+"="+string(data))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	<-ctx.Done()
	_ = stdin.Close() // the process stops sending, waits for its requests and answers
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	res := &widgetenv.LoadResult{}
	if err := json.Unmarshal(stdout.Bytes(), res); err != nil {
		return nil, fmt.Errorf("its answer: %w (%.200s; %s)", err, stdout.Bytes(), stderr.Bytes())
	}
	return res, nil
}

// runEveryday is the everyday load's process: spec is everydayEnv's value.
func runEveryday(spec string) error {
	var s everydaySpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return fmt.Errorf("%s: %w", everydayEnv, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.CA) {
		return errors.New("no CA certificate in the spec")
	}
	c := &cluster.Cluster{NetNS: s.NetNS}
	transport := &http.Transport{
		DialContext:         c.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: s.ServerName, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: apiserverIdleConnsPerHost,
	}
	defer transport.CloseIdleConnections()
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	load := &widgetenv.Load{Client: &http.Client{Timeout: time.Minute, Transport: transport},
		Targets: func() []string { return s.Targets }, Rate: s.Rate}
	if err := load.Warm(everydayWarmConns); err != nil {
		return fmt.Errorf("opening the everyday load's connections: %w", err)
	}
	return json.NewEncoder(os.Stdout).Encode(load.Run(ctx))
}
