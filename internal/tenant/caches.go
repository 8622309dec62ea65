package tenant

// KindCachedContents holds the context-cache resources (internal/ctxcache):
// one record per cache, under its id, in the same store as the tenants
// that own them, so that a restart keeps them and a cluster replicates
// them with the rest.
const KindCachedContents Kind = "cachedContents"

// Store returns the store the directory keeps its records in, for the
// packages whose records live beside them (context caches).
func (d *Directory) Store() Store { return d.store }
