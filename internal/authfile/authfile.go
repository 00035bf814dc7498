package authfile

// File is the document of an --auth-file. A key's share of the ingress
// ("weight", "exempt") is read beside it by the ingress command, which
// defaults the weight when the member is absent.
type File struct {
	Keys []Key `json:"keys"`
	// Allow maps a caller to the method patterns it may call, beside
	// those of its key.
	Allow map[string][]string `json:"allow"`
	// DefaultAllow are the patterns of a caller with none of its own.
	DefaultAllow []string `json:"default_allow"`
}

// Key is one API key of a [File].
type Key struct {
	// Name is the caller the key authenticates.
	Name string `json:"name"`
	// SHA256 is the hex SHA-256 digest of the key, never the key itself.
	SHA256 string `json:"sha256"`
	// Allow are the method patterns the caller may call.
	Allow []string `json:"allow"`
	// Operator lets the caller see every caller's data on the dashboard.
	Operator bool `json:"operator"`
}
