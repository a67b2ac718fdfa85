package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// leaseName is the operator's leader-election Lease (cmd/operator's LeaderElectionID).
const leaseName = "callback-platform-operator.callbackd.io"

// startOperator runs cmd/operator as a local process against the cluster, authenticated as the
// chart's operator ServiceAccount with a token from the TokenRequest API: every call it makes is
// authorized by the chart's ClusterRole and leader-election Role, nothing more. The operator pods
// of the chart are simulated by kwok (they never run), so this process does the reconciling.
// Leader election is on, in the release namespace, as the chart configures it.
func (e *e2e) startOperator(t *testing.T) {
	ctx := e.ctx(t, time.Minute)
	dep := e.operatorDeployment(ctx, t)
	sa := dep.Spec.Template.Spec.ServiceAccountName
	if sa == "" || sa == "default" {
		t.Fatalf("expected the chart's operator Deployment to name its own ServiceAccount, got %q", sa)
	}
	cs, err := e.cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", releaseNamespace, sa, err)
	}
	kubeconfig := filepath.Join(e.workDir, "operator.kubeconfig")
	if err := writeTokenKubeconfig(e.cluster.Config.Host, e.cluster.Config.CAData, e.cluster.Config.CAFile, tr.Status.Token, sa, kubeconfig); err != nil {
		t.Fatal(err)
	}

	// Prove the identity before starting: the token is the ServiceAccount's, not an admin's.
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenReview: %v", err)
	}
	wantUser := fmt.Sprintf("system:serviceaccount:%s:%s", releaseNamespace, sa)
	if !review.Status.Authenticated || review.Status.User.Username != wantUser {
		t.Fatalf("expected the operator token to authenticate as %s, got %+v", wantUser, review.Status)
	}

	probe := freeLoopbackAddr(t)
	args := append([]string{
		"--leader-elect=true",
		"--leader-election-namespace=" + releaseNamespace,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + probe,
		"--log-text",
	}, operatorArgsFromChart(dep.Spec.Template.Spec.Containers[0].Args)...)
	env := append(filteredEnv("KUBECONFIG", "KUBERNETES_"), "KUBECONFIG="+kubeconfig)
	e.operatorLog = filepath.Join(e.workDir, "operator.log")
	e.operator = startLocal(e.t, "operator", filepath.Join(e.binDir, "operator"), args, env, e.operatorLog, func(s string) string { return s })
	eventually(t, time.Minute, "the operator's /readyz", func(ctx context.Context) (bool, string) {
		if e.operator.exited() {
			t.Fatalf("the operator exited: %v\n%s", e.operator.waitErr, tailFile(e.operatorLog, 30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+probe+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	// The chart's own operator pods are simulated and never run: the Lease can only be ours.
	eventually(t, time.Minute, "the operator to hold the leader-election Lease "+leaseName, func(ctx context.Context) (bool, string) {
		lease := &coordinationv1.Lease{}
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: releaseNamespace, Name: leaseName}, lease); err != nil {
			return false, err.Error()
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder != "", "holder " + holder
	})
	t.Logf("operator running as %s (pid %d), leader election in %s", wantUser, e.operator.cmd.Process.Pid, releaseNamespace)
}

// operatorArgsFromChart keeps the chart's own tuning flags (log level, concurrency) and drops the
// ones about in-cluster addresses, which the local process sets itself.
func operatorArgsFromChart(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--log-level=") || strings.HasPrefix(a, "--max-concurrent-reconciles=") {
			out = append(out, a)
		}
	}
	return out
}

// writeTokenKubeconfig writes a kubeconfig that authenticates with a bearer token only.
func writeTokenKubeconfig(server string, caData []byte, caFile, token, user, path string) error {
	if len(caData) == 0 && caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("read the cluster CA: %w", err)
		}
		caData = data
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kwok"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "kwok", AuthInfo: user}
	cfg.CurrentContext = "operator"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write the operator kubeconfig: %w", err)
	}
	return nil
}

// checkOperatorLog fails on any request the API server refused the operator: the chart's RBAC
// must cover everything it does (reconcile, Secrets, events, leader election).
func (e *e2e) checkOperatorLog(t *testing.T) {
	data, err := os.ReadFile(e.operatorLog)
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	for _, line := range strings.Split(string(data), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "forbidden") || strings.Contains(l, "cannot list") || strings.Contains(l, "cannot get") ||
			strings.Contains(l, "cannot create") || strings.Contains(l, "cannot patch") {
			denied = append(denied, line)
		}
	}
	if len(denied) > 0 {
		t.Errorf("expected no request of the operator refused by the chart's RBAC, got %d, e.g.:\n%s", len(denied), strings.Join(denied[:min(5, len(denied))], "\n"))
	}
	lines := strings.Count(string(data), "\n")
	t.Logf("operator log: %d lines, %d refused requests", lines, len(denied))
}

// freeLoopbackAddr returns 127.0.0.1:port with a port nothing listened on a moment ago.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
