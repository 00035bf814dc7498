package demo

import "github.com/toolbus/toolbus/internal/egress"

// WithFetchNet makes fetch_page's guard resolve host names with r and dial
// the addresses it admitted with dial, so that tests reach no network.
func WithFetchNet(r egress.Resolver, dial egress.DialFunc) Option {
	return func(cfg *config) error {
		cfg.egress = append(cfg.egress, egress.WithResolver(r), egress.WithDialer(dial))
		return nil
	}
}
