package deploy

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// imageTag runs build-images.sh --tag for the checkout at src with the
// environment variable TOOLBUS_IMAGE_TAG set to env ("" leaves it unset),
// and returns what it printed.
func imageTag(t *testing.T, src, env string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "build-images.sh", "--tag")
	cmd.Env = append(os.Environ(), "SRC="+src, "TOOLBUS_IMAGE_TAG="+env)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.Join(err, errors.New(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// TestImageTagPerCheckout checks that build-images.sh tags the images of
// each checkout apart, since tags belong to the whole Docker daemon, and
// that TOOLBUS_IMAGE_TAG, which the compose file and the integration
// suite read too, overrides it.
func TestImageTagPerCheckout(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("build-images.sh needs bash, which is not installed here")
	}
	one, other := t.TempDir(), t.TempDir()
	perCheckout := regexp.MustCompile(`^dev-[0-9a-f]{12}$`)
	tagOne, err := imageTag(t, one, "")
	if err != nil || !perCheckout.MatchString(tagOne) {
		t.Fatalf("--tag of %s = %q, %v; want dev- and 12 hex digits", one, tagOne, err)
	}
	tests := []struct {
		name    string
		src     string
		env     string
		want    func(string) bool
		wantErr bool
	}{
		{name: "the same checkout, the same tag", src: one, want: func(got string) bool { return got == tagOne }},
		{name: "the same checkout by another path", src: one + "/./", want: func(got string) bool { return got == tagOne }},
		{name: "another checkout, another tag", src: other, want: func(got string) bool { return perCheckout.MatchString(got) && got != tagOne }},
		{name: "the variable wins", src: one, env: "1.4.0", want: func(got string) bool { return got == "1.4.0" }},
		{name: "not a Docker tag", src: one, env: "a b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := imageTag(t, tt.src, tt.env)
			if tt.wantErr {
				if err == nil {
					t.Errorf("--tag with TOOLBUS_IMAGE_TAG=%q = %q, want an error", tt.env, got)
				}
				return
			}
			if err != nil || !tt.want(got) {
				t.Errorf("--tag of %s with TOOLBUS_IMAGE_TAG=%q = %q, %v; want %s", tt.src, tt.env, got, err, tt.name)
			}
		})
	}
}
