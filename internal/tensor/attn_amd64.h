// Shared by the attention kernels of attn_amd64.s and attn512_amd64.s.

// NEXT_BLOCK steps a paged kernel to its next block: row gets the block's
// first row (the slice header at tbl, plus off), tbl moves to the next
// header, rows gets the block's rows, min(bs, left), and left loses them.
#define NEXT_BLOCK(tbl, off, row, bs, rows, left) \
	MOVQ (tbl), row; \
	ADDQ off, row; \
	ADDQ $24, tbl; \
	MOVQ bs, rows; \
	CMPQ rows, left; \
	CMOVQGT left, rows; \
	SUBQ rows, left
