package demo

import "testing"

func TestHTMLText(t *testing.T) {
	for _, tc := range []struct {
		name, body         string
		wantTitle, wantTxt string
	}{
		{"plain", `<html><head><title>T</title></head><body><p>a</p><p>b</p></body></html>`, "T", "a\nb"},
		{"entities", `<title>Tom &amp; Jerry</title><p>x &lt; y</p>`, "Tom & Jerry", "x < y"},
		{"inline elements join words", `<p>wor<b>ld</b> <i>wide</i></p>`, "", "world wide"},
		{"hidden elements", `<body><script>alert(1)</script><style>p{}</style><noscript>no</noscript>seen</body>`, "", "seen"},
		{"first title only", `<title>one</title><title>two</title>`, "one", ""},
		{"cut inside a tag", `<title>T</title><p>text</p><p cla`, "T", "text"},
		{"cut inside the title", `<title>Long ti`, "Long ti", ""},
		{"no markup", `just text`, "", "just text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			title, text := htmlText([]byte(tc.body))
			if title != tc.wantTitle || text != tc.wantTxt {
				t.Errorf("htmlText(%q) = %q, %q, want %q, %q", tc.body, title, text, tc.wantTitle, tc.wantTxt)
			}
		})
	}
}
