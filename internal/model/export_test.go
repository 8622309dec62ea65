package model

// SetGroupScoreLimit lowers the score values a group of tokens sharing
// blocks may take (maxGroupScores), so that tests reach the limit with
// short contexts.
func SetGroupScoreLimit(r *Runner, n int) { r.groupScoreLimit = n }

// SetWindowRows lowers the positions the f16 attention passes over at once
// (attnWindowRows), so that tests reach several windows, and windows cut
// short, with short contexts.
func SetWindowRows(r *Runner, n int) { r.windowRows = n }
