package model

// SetGroupScoreLimit lowers the score values a group of tokens sharing
// blocks may take (maxGroupScores), so that tests reach the limit with
// short contexts.
func SetGroupScoreLimit(r *Runner, n int) { r.groupScoreLimit = n }

// SetSharedWindowRows lowers the shared positions attendShared passes over
// at once (sharedWindowRows), so that tests reach several windows, and
// windows cut short, with short contexts.
func SetSharedWindowRows(r *Runner, n int) { r.sharedWindowRows = n }
