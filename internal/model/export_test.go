package model

// SetGroupScoreLimit lowers the score values a group of tokens sharing
// blocks may take (maxGroupScores), so that tests reach the limit with
// short contexts.
func SetGroupScoreLimit(r *Runner, n int) { r.groupScoreLimit = n }
