package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/html"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

type fetcher struct {
	client   *http.Client
	maxBytes int64
	timeout  time.Duration
}

// fetchParams require url.
type fetchParams struct {
	URL string `json:"url"`
}

// page is fetch_page's result. A page that answered with an error status is
// still a result: the fetch worked, and the caller sees the status. Content
// is the text a reader sees for HTML, the body for other text types, and
// empty for anything else (an image, say).
type page struct {
	Title       string `json:"title"`
	Content     string `json:"content"`
	StatusCode  int    `json:"status_code"`
	ContentType string `json:"content_type"`
	// Truncated reports that the page was longer than the size cap; Limit
	// and MaxBytes then name the cap.
	Truncated bool   `json:"truncated"`
	Limit     string `json:"limit,omitempty"`
	MaxBytes  int64  `json:"max_bytes,omitempty"`
}

func (f *fetcher) fetch(ctx context.Context, p fetchParams) (*page, error) {
	u, err := checkURL(p.URL)
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, worker.InvalidParams("/url", err.Error())
	}
	req.Header.Set("User-Agent", "toolbus-demo")
	req.Header.Set("Accept", "text/html, text/*;q=0.9, */*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.failure(ctx, fctx, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return nil, f.failure(ctx, fctx, u, err)
	}
	pg := &page{StatusCode: resp.StatusCode}
	if int64(len(body)) > f.maxBytes {
		body = body[:f.maxBytes]
		pg.Truncated, pg.Limit, pg.MaxBytes = true, "max_fetch_bytes", f.maxBytes
	}
	pg.ContentType = resp.Header.Get("Content-Type")
	if pg.ContentType == "" {
		pg.ContentType = http.DetectContentType(body)
	}
	mediaType, _, _ := mime.ParseMediaType(pg.ContentType)
	switch {
	case mediaType == "text/html" || mediaType == "application/xhtml+xml":
		pg.Title, pg.Content = htmlText(body)
	case isText(mediaType):
		pg.Content = strings.ToValidUTF8(string(body), "\uFFFD")
	}
	return pg, nil
}

func checkURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, worker.InvalidParams("/url", "must not be empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, worker.InvalidParams("/url", "not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, worker.InvalidParams("/url", fmt.Sprintf("scheme must be http or https, got %q", u.Scheme))
	}
	if u.Host == "" {
		return nil, worker.InvalidParams("/url", "has no host")
	}
	return u, nil
}

// failure reports a fetch that did not get a page. When the call itself
// ran out of time or was canceled that is what it answers. An address the
// guard refused is named with the rule and the flag that admits it:
// invalid params when it is the URL's own host, a tool error when a
// redirect led there. Any other failure is a tool error whose data gives
// the URL and the class of the failure; the error's own text, which may
// quote whatever answered, is not passed on.
func (f *fetcher) failure(ctx, fctx context.Context, u *url.URL, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	class := egress.Classify(err)
	if errors.Is(fctx.Err(), context.DeadlineExceeded) || class == egress.ClassTimeout {
		return schema.NewError(schema.CodeToolError, fmt.Sprintf("fetch_page: no answer from %s within %v", u.Host, f.timeout),
			map[string]any{"url": u.String(), "reason": "timeout", "limit": "fetch_timeout",
				"timeout_ms": f.timeout.Milliseconds(), "retryable": true})
	}
	var blocked *egress.BlockedError
	if errors.As(err, &blocked) {
		reason := blocked.Reason() + "; fetch_page reaches loopback, private, link-local and other internal " +
			"addresses only when the operator allows them with --fetch-allow"
		if strings.EqualFold(blocked.Host, strings.TrimSuffix(u.Hostname(), ".")) {
			return schema.NewError(schema.CodeInvalidParams, "invalid params: /url: "+reason,
				map[string]any{"field": "/url", "reason": reason, "range": blocked.Range.Kind})
		}
		return schema.NewError(schema.CodeToolError, "fetch_page: "+u.Host+" redirected to an address it may not reach: "+reason,
			map[string]any{"url": u.String(), "reason": string(egress.ClassBlocked), "range": blocked.Range.Kind})
	}
	return schema.NewError(schema.CodeToolError, fmt.Sprintf("fetch_page: could not fetch %s: %s", u.Host, class.Describe()),
		map[string]any{"url": u.String(), "reason": string(class)})
}

func isText(mediaType string) bool {
	if strings.HasPrefix(mediaType, "text/") {
		return true
	}
	switch mediaType {
	case "application/json", "application/xml", "application/javascript", "application/x-ndjson":
		return true
	}
	return strings.HasSuffix(mediaType, "+json") || strings.HasSuffix(mediaType, "+xml")
}

// blockElements start a new line in a page's text.
var blockElements = map[string]bool{
	"address": true, "article": true, "aside": true, "blockquote": true, "br": true, "dd": true, "div": true,
	"dl": true, "dt": true, "figcaption": true, "footer": true, "form": true, "h1": true, "h2": true,
	"h3": true, "h4": true, "h5": true, "h6": true, "header": true, "hr": true, "li": true, "main": true,
	"nav": true, "ol": true, "p": true, "pre": true, "section": true, "table": true, "td": true,
	"th": true, "tr": true, "ul": true,
}

// hiddenElements hold no text a reader sees.
var hiddenElements = map[string]bool{
	"head": true, "script": true, "style": true, "noscript": true, "template": true, "svg": true,
}

// htmlText returns the text of a page's first <title> and the text a reader
// sees, one line per block with runs of white space made one space. body may
// be cut anywhere: the tokenizer reads what is there.
func htmlText(body []byte) (title, content string) {
	z := html.NewTokenizer(bytes.NewReader(body))
	var text strings.Builder
	var titleText strings.Builder
	inTitle, sawTitle := false, false
	hidden := 0
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return strings.Join(strings.Fields(titleText.String()), " "), cleanLines(text.String())
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			tag := string(name)
			switch {
			case tag == "title":
				inTitle = tt == html.StartTagToken
				sawTitle = sawTitle || tt == html.EndTagToken
			case hiddenElements[tag] && tt == html.StartTagToken:
				hidden++
			case hiddenElements[tag] && tt == html.EndTagToken && hidden > 0:
				hidden--
			case blockElements[tag]:
				text.WriteByte('\n')
			}
		case html.TextToken:
			switch {
			case inTitle:
				if !sawTitle {
					titleText.Write(z.Text())
				}
			case hidden == 0:
				text.Write(z.Text())
			}
		}
	}
}

func cleanLines(s string) string {
	var lines []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}
