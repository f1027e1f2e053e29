//go:build amd64 && !purego

#include "textflag.h"

#define ZERO8 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// Store Y0..Y7 to the 256 bytes at DX.
#define STORE8 \
	VMOVUPS Y0, (DX) \
	VMOVUPS Y1, 32(DX) \
	VMOVUPS Y2, 64(DX) \
	VMOVUPS Y3, 96(DX) \
	VMOVUPS Y4, 128(DX) \
	VMOVUPS Y5, 160(DX) \
	VMOVUPS Y6, 192(DX) \
	VMOVUPS Y7, 224(DX)

// The gemv kernels' ends: gemv16's four pairs of partial sums (Y0..Y7) added
// into the 16 floats at DX; gemv64's four panels' sums added into the 64.
#define ADD16STORE \
	VADDPS Y2, Y0, Y0 \
	VADDPS Y3, Y1, Y1 \
	VADDPS Y6, Y4, Y4 \
	VADDPS Y7, Y5, Y5 \
	VADDPS Y4, Y0, Y0 \
	VADDPS Y5, Y1, Y1 \
	VADDPS (DX), Y0, Y0 \
	VADDPS 32(DX), Y1, Y1 \
	VMOVUPS Y0, (DX) \
	VMOVUPS Y1, 32(DX)

#define ADD64STORE \
	VADDPS (DX), Y0, Y0 \
	VADDPS 32(DX), Y1, Y1 \
	VADDPS 64(DX), Y2, Y2 \
	VADDPS 96(DX), Y3, Y3 \
	VADDPS 128(DX), Y4, Y4 \
	VADDPS 160(DX), Y5, Y5 \
	VADDPS 192(DX), Y6, Y6 \
	VADDPS 224(DX), Y7, Y7 \
	STORE8

#define ZERO10 \
	ZERO8 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9

#define ZERO12 \
	ZERO10 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

// One k step of the top four rows of a tile: LOAD puts the B row at
// boff(DI) in Y12/Y13 (F32, or a 16-bit type's BF16 or F16), and the
// broadcasts of A's column p at SI, rows R11 bytes apart (R12 = 3·R11),
// go to P and Q in turn (the bf16 tiles keep their mask in Y15 and pass
// Y14 twice). The 4x16 edge kernel runs it alone.
#define STEP4L(LOAD, boff, P, Q) \
	LOAD(boff, DI, Y12, Y13) \
	VBROADCASTSS (SI), P \
	VFMADD231PS Y12, P, Y0 \
	VFMADD231PS Y13, P, Y1 \
	VBROADCASTSS (SI)(R11*1), Q \
	VFMADD231PS Y12, Q, Y2 \
	VFMADD231PS Y13, Q, Y3 \
	VBROADCASTSS (SI)(R11*2), P \
	VFMADD231PS Y12, P, Y4 \
	VFMADD231PS Y13, P, Y5 \
	VBROADCASTSS (SI)(R12*1), Q \
	VFMADD231PS Y12, Q, Y6 \
	VFMADD231PS Y13, Q, Y7

// One k step of the top five rows: STEP4L and row 4.
#define STEP5L(LOAD, boff, P, Q) \
	STEP4L(LOAD, boff, P, Q) \
	VBROADCASTSS (SI)(R11*4), P \
	VFMADD231PS Y12, P, Y8 \
	VFMADD231PS Y13, P, Y9

// One k step of the 6x16 tile: STEP5L and row 5 (R13 = 5·R11).
#define STEP6L(LOAD, boff, P, Q) \
	STEP5L(LOAD, boff, P, Q) \
	VBROADCASTSS (SI)(R13*1), Q \
	VFMADD231PS Y12, Q, Y10 \
	VFMADD231PS Y13, Q, Y11

// A float32 panel row: 16 columns at off(base), 0..7 in lo, 8..15 in hi.
#define F32(off, base, lo, hi) \
	VMOVUPS off(base), lo \
	VMOVUPS 32+off(base), hi

// The k steps over float32 panels (64 bytes a row), bf16 ones and f16 ones
// (32 bytes a row; see BF16 and F16).
#define STEP4(boff) STEP4L(F32, boff, Y14, Y15)
#define STEP5(boff) STEP5L(F32, boff, Y14, Y15)
#define STEP(boff) STEP6L(F32, boff, Y14, Y15)
#define STEP4_BF16(boff) STEP4L(BF16, boff, Y14, Y14)
#define STEP5_BF16(boff) STEP5L(BF16, boff, Y14, Y14)
#define STEP6_BF16(boff) STEP6L(BF16, boff, Y14, Y14)
#define STEP4_F16(boff) STEP4L(F16, boff, Y14, Y15)
#define STEP5_F16(boff) STEP5L(F16, boff, Y14, Y15)
#define STEP6_F16(boff) STEP6L(F16, boff, Y14, Y15)

// Touch one 64-byte row of the C tile (at R9) and step to the next.
#define PREFETCHROW \
	PREFETCHT0 (R9) \
	PREFETCHT0 32(R9) \
	ADDQ R8, R9

// Touch the n rows of a tile's C, so that their lines arrive while the k
// loop runs.
#define TOUCH4 \
	PREFETCHROW \
	PREFETCHROW \
	PREFETCHROW \
	PREFETCHROW

#define TOUCH5 \
	TOUCH4 \
	PREFETCHROW

#define TOUCH6 \
	TOUCH5 \
	PREFETCHROW

#define STORE(lo, hi) \
	VADDPS (DX), lo, lo \
	VMOVUPS lo, (DX) \
	VADDPS 32(DX), hi, hi \
	VMOVUPS hi, 32(DX) \
	ADDQ R8, DX

// Write one row of the tile over C (set: the first k block of a product
// with beta 0, whose C was never cleared).
#define SET(lo, hi) \
	VMOVUPS lo, (DX) \
	VMOVUPS hi, 32(DX) \
	ADDQ R8, DX

// A bf16 panel row holds its 16 columns paired: (col i, col i+8) for i < 8,
// so that a 32-byte load splits into two float32 vectors without a
// shuffle: shifting each pair's low half up gives columns 0..7, masking
// its low half off gives columns 8..15. mask: 0xffff0000 in every lane.
#define SPLIT16(off, base, mask, lo, hi) \
	VMOVDQU off(base), hi \
	VPSLLD $16, hi, lo \
	VPAND mask, hi, hi

// Set mask to 0xffff0000 in every lane.
#define HIGHMASK(mask) \
	VPCMPEQD mask, mask, mask \
	VPSLLD $16, mask, mask

// The 16-bit panels' loads: 16 values of a panel row at off(base) as two
// float32 vectors, columns 0..7 in lo and 8..15 in hi. BF16 splits a
// paired row (Y15 the mask HIGHMASK sets); F16 converts IEEE halves, kept
// in column order (F16C).
#define BF16(off, base, lo, hi) SPLIT16(off, base, Y15, lo, hi)

#define F16(off, base, lo, hi) \
	VCVTPH2PS off(base), lo \
	VCVTPH2PS 16+off(base), hi

// gemv16AVX over a 16-bit panel, its rows loaded by LOAD: y[0:16] +=
// Σ_p x[p]·panel row p; k a multiple of 4.
#define GEMV16_HALF(LOAD) \
	MOVQ k+0(FP), CX \
	MOVQ x+8(FP), SI \
	MOVQ panel+16(FP), DI \
	MOVQ y+24(FP), DX \
	ZERO8 \
	HIGHMASK(Y15) \
	SHRQ $2, CX \
	JE   store \
loop: \
	VBROADCASTSS (SI), Y8 \
	VBROADCASTSS 4(SI), Y9 \
	LOAD(0, DI, Y12, Y13) \
	VFMADD231PS Y12, Y8, Y0 \
	VFMADD231PS Y13, Y8, Y1 \
	LOAD(32, DI, Y12, Y13) \
	VFMADD231PS Y12, Y9, Y2 \
	VFMADD231PS Y13, Y9, Y3 \
	VBROADCASTSS 8(SI), Y10 \
	VBROADCASTSS 12(SI), Y11 \
	LOAD(64, DI, Y12, Y13) \
	VFMADD231PS Y12, Y10, Y4 \
	VFMADD231PS Y13, Y10, Y5 \
	LOAD(96, DI, Y12, Y13) \
	VFMADD231PS Y12, Y11, Y6 \
	VFMADD231PS Y13, Y11, Y7 \
	ADDQ $16, SI \
	ADDQ $128, DI \
	DECQ CX \
	JNZ  loop \
store: \
	ADD16STORE \
	VZEROUPPER \
	RET

// gemv64AVX over four 16-bit panels at panels + i·stride bytes.
#define GEMV64_HALF(LOAD) \
	MOVQ k+0(FP), CX \
	MOVQ x+8(FP), SI \
	MOVQ panels+16(FP), DI \
	MOVQ stride+24(FP), R11 \
	MOVQ y+32(FP), DX \
	LEAQ (DI)(R11*1), R8 \
	LEAQ (R8)(R11*1), R9 \
	LEAQ (R9)(R11*1), R10 \
	ZERO8 \
	HIGHMASK(Y15) \
	TESTQ CX, CX \
	JE   store \
loop: \
	VBROADCASTSS (SI), Y8 \
	LOAD(0, DI, Y10, Y11) \
	LOAD(0, R8, Y12, Y13) \
	VFMADD231PS Y10, Y8, Y0 \
	VFMADD231PS Y11, Y8, Y1 \
	VFMADD231PS Y12, Y8, Y2 \
	VFMADD231PS Y13, Y8, Y3 \
	LOAD(0, R9, Y10, Y11) \
	LOAD(0, R10, Y12, Y13) \
	VFMADD231PS Y10, Y8, Y4 \
	VFMADD231PS Y11, Y8, Y5 \
	VFMADD231PS Y12, Y8, Y6 \
	VFMADD231PS Y13, Y8, Y7 \
	ADDQ $4, SI \
	ADDQ $32, DI \
	ADDQ $32, R8 \
	ADDQ $32, R9 \
	ADDQ $32, R10 \
	DECQ CX \
	JNZ  loop \
store: \
	ADD64STORE \
	VZEROUPPER \
	RET

// dst = the 16-bit panel rows src as float32 panel rows, in column order;
// n a multiple of 16.
#define WIDEN_HALF(LOAD) \
	MOVQ n+0(FP), CX \
	MOVQ src+8(FP), SI \
	MOVQ dst+16(FP), DI \
	HIGHMASK(Y15) \
	SHRQ $4, CX \
	JE   done \
loop: \
	LOAD(0, SI, Y0, Y1) \
	VMOVUPS Y0, (DI) \
	VMOVUPS Y1, 32(DI) \
	ADDQ $32, SI \
	ADDQ $64, DI \
	DECQ CX \
	JNZ  loop \
done: \
	VZEROUPPER \
	RET

// The tile kernels' shared parts. Labels are local to each TEXT block, so
// TILE_LOOP can appear once in each kernel. A's element (i, p) is at
// a + 4·(i·rs + p·cs): R11 = 4·rs, R14 = 4·cs.
#define TILE_ARGS \
	MOVQ k+0(FP), CX \
	MOVQ a+8(FP), SI \
	MOVQ rs+16(FP), R11 \
	MOVQ cs+24(FP), R14 \
	MOVQ b+32(FP), DI \
	MOVQ c+40(FP), DX \
	MOVQ ldc+48(FP), R8 \
	MOVQ next+56(FP), R10 \
	ADDQ poff+64(FP), R10 \
	MOVQ pstep+72(FP), AX \
	SHLQ $2, R8 \
	A_STRIDES \
	MOVQ DX, R9

// A's strides in bytes from its element strides in R11 and R14, and the
// row offsets STEP needs: R12 = 3·R11, R13 = 5·R11.
#define A_STRIDES \
	SHLQ $2, R11 \
	SHLQ $2, R14 \
	LEAQ (R11)(R11*2), R12 \
	LEAQ (R11)(R11*4), R13

// Single k steps of S, CX of them, from label L; a B row is W bytes.
#define STEPS1(S, L, W) \
L: \
	S(0) \
	ADDQ R14, SI \
	ADDQ $W, DI \
	DECQ CX \
	JNZ  L

// The k loop, four steps at a time: each step also touches the next B
// panel at R10, which moves AX bytes a step, so a panel streaming from
// memory arrives while this one is multiplied. Steps alternate between S
// and T, which may keep sums of their own (the AVX-512 tiles: see ZSTEP4).
// Then the second source's k2 steps (none when k2 is 0): a LoRA term's
// u·Bᵀ riding on its base product's tile, whose float32 rows S2 steps
// over. B's rows are W1 bytes (W2, W3 and W4: two, three and four of
// them). Ends at label store.
#define TILE_LOOP(S, T, S2, W1, W2, W3, W4) \
	MOVQ CX, BX \
	SHRQ $2, BX \
	ANDQ $3, CX \
	TESTQ BX, BX \
	JE   tail \
loop4: \
	PREFETCHT0 384(SI) \
	PREFETCHT0 (R10) \
	S(0) \
	ADDQ R14, SI \
	ADDQ AX, R10 \
	PREFETCHT0 (R10) \
	T(W1) \
	ADDQ R14, SI \
	ADDQ AX, R10 \
	PREFETCHT0 (R10) \
	S(W2) \
	ADDQ R14, SI \
	ADDQ AX, R10 \
	PREFETCHT0 (R10) \
	T(W3) \
	ADDQ R14, SI \
	ADDQ AX, R10 \
	ADDQ $W4, DI \
	DECQ BX \
	JNZ  loop4 \
tail: \
	TESTQ CX, CX \
	JE    second \
	STEPS1(S, loop1, W1) \
second: \
	MOVQ k2+120(FP), CX \
	TESTQ CX, CX \
	JE    store \
	MOVQ a2+88(FP), SI \
	MOVQ rs2+96(FP), R11 \
	MOVQ cs2+104(FP), R14 \
	MOVQ b2+112(FP), DI \
	A_STRIDES \
	STEPS1(S2, loop2, 64)

// The row-strip kernels' arguments: k in CX, a in SI, b in DI, b's row
// stride in bytes in R8, c in DX.
#define STRIP_ARGS \
	MOVQ k+0(FP), CX \
	MOVQ a+16(FP), SI \
	MOVQ b+24(FP), DI \
	MOVQ ldb+32(FP), R8 \
	MOVQ c+40(FP), DX \
	SHLQ $2, R8

// The AVX2 tile kernels' ends: add the rows' sums into C (set: write them
// over it).
#define TILE_END(STORES, SETS) \
store: \
	MOVBLZX set+80(FP), BX \
	TESTQ   BX, BX \
	JNE     set \
	STORES \
	VZEROUPPER \
	RET \
set: \
	SETS \
	VZEROUPPER \
	RET

#define STORE4 \
	STORE(Y0, Y1) \
	STORE(Y2, Y3) \
	STORE(Y4, Y5) \
	STORE(Y6, Y7)

#define STORE5 \
	STORE4 \
	STORE(Y8, Y9)

#define STORE6 \
	STORE5 \
	STORE(Y10, Y11)

#define SET4 \
	SET(Y0, Y1) \
	SET(Y2, Y3) \
	SET(Y4, Y5) \
	SET(Y6, Y7)

#define SET5 \
	SET4 \
	SET(Y8, Y9)

#define SET6 \
	SET5 \
	SET(Y10, Y11)

// An AVX2 tile of 4, 5 or 6 rows over a float32 panel, whose rows are 64
// bytes.
#define TILE32(TOUCH, ZERO, S, STORES, SETS) \
	TILE_ARGS \
	TOUCH \
	ZERO \
	TILE_LOOP(S, S, S, 64, 128, 192, 256) \
	TILE_END(STORES, SETS)

// The same over a 16-bit panel, read as it lies (32 bytes a row) and
// widened in registers by S (LoRA's second source stays float32: S2). MASK
// sets what the type's loads need (HIGHMASK for bf16's Y15).
#define TILE16(MASK, TOUCH, ZERO, S, S2, STORES, SETS) \
	TILE_ARGS \
	MASK \
	TOUCH \
	ZERO \
	TILE_LOOP(S, S, S2, 32, 64, 96, 128) \
	TILE_END(STORES, SETS)

#define NOMASK

// func tile6x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile6x16AVX(SB), NOSPLIT, $0-128
	TILE32(TOUCH6, ZERO12, STEP, STORE6, SET6)

// func tile5x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
// A tile of five rows: sixteen decode rows cut 6+5+5 keep ten or more
// accumulators in every tile, where 6+6+4 left the last tile eight, too few
// to hide the FMA's latency (that tile cost 1.23× the 6-row one per row).
TEXT ·tile5x16AVX(SB), NOSPLIT, $0-128
	TILE32(TOUCH5, ZERO10, STEP5, STORE5, SET5)

// func tile4x16AVX(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
// The bottom tile of a packed row block that leaves four rows or fewer, and
// the tiles of eight or fourteen rows read in place: a third less work than
// a padded 6x16 tile, and it writes C directly.
TEXT ·tile4x16AVX(SB), NOSPLIT, $0-128
	TILE32(TOUCH4, ZERO8, STEP4, STORE4, SET4)

// func tile6x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile6x16BF16AVX(SB), NOSPLIT, $0-128
	TILE16(HIGHMASK(Y15), TOUCH6, ZERO12, STEP6_BF16, STEP, STORE6, SET6)

// func tile5x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile5x16BF16AVX(SB), NOSPLIT, $0-128
	TILE16(HIGHMASK(Y15), TOUCH5, ZERO10, STEP5_BF16, STEP5, STORE5, SET5)

// func tile4x16BF16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile4x16BF16AVX(SB), NOSPLIT, $0-128
	TILE16(HIGHMASK(Y15), TOUCH4, ZERO8, STEP4_BF16, STEP4, STORE4, SET4)

// func tile6x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile6x16F16AVX(SB), NOSPLIT, $0-128
	TILE16(NOMASK, TOUCH6, ZERO12, STEP6_F16, STEP, STORE6, SET6)

// func tile5x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile5x16F16AVX(SB), NOSPLIT, $0-128
	TILE16(NOMASK, TOUCH5, ZERO10, STEP5_F16, STEP5, STORE5, SET5)

// func tile4x16F16AVX(k int, a *float32, rs, cs int, b *uint16, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile4x16F16AVX(SB), NOSPLIT, $0-128
	TILE16(NOMASK, TOUCH4, ZERO8, STEP4_F16, STEP4, STORE4, SET4)

// The AVX-512 tiles: a row of the 16-wide panel is one Z register, so a k
// step of six rows is six FMAs, each taking its broadcast of A straight
// from memory. Six sums alone would leave the two FMA units waiting on
// each other's latency (four cycles); steps alternate between two sets of
// sums instead (Z0–Z5 and Z6–Z11, the B row in Z16 or Z17), added together
// before the store. In L1 a 6x16 tile ran 1.87× the AVX2 one per core.

// One k step of the top four rows: the B row at boff(DI) into zb, A's
// column p at SI, rows R11 bytes apart (R12 = 3·R11), into s0..s3.
#define ZSTEP4(boff, zb, s0, s1, s2, s3) \
	VMOVUPS boff(DI), zb \
	VFMADD231PS.BCST (SI), zb, s0 \
	VFMADD231PS.BCST (SI)(R11*1), zb, s1 \
	VFMADD231PS.BCST (SI)(R11*2), zb, s2 \
	VFMADD231PS.BCST (SI)(R12*1), zb, s3

#define ZSTEP5(boff, zb, s0, s1, s2, s3, s4) \
	ZSTEP4(boff, zb, s0, s1, s2, s3) \
	VFMADD231PS.BCST (SI)(R11*4), zb, s4

// R13 = 5·R11.
#define ZSTEP6(boff, zb, s0, s1, s2, s3, s4, s5) \
	ZSTEP5(boff, zb, s0, s1, s2, s3, s4) \
	VFMADD231PS.BCST (SI)(R13*1), zb, s5

#define Z6S(boff) ZSTEP6(boff, Z16, Z0, Z1, Z2, Z3, Z4, Z5)
#define Z6T(boff) ZSTEP6(boff, Z17, Z6, Z7, Z8, Z9, Z10, Z11)
#define Z5S(boff) ZSTEP5(boff, Z16, Z0, Z1, Z2, Z3, Z4)
#define Z5T(boff) ZSTEP5(boff, Z17, Z6, Z7, Z8, Z9, Z10)
#define Z4S(boff) ZSTEP4(boff, Z16, Z0, Z1, Z2, Z3)
#define Z4T(boff) ZSTEP4(boff, Z17, Z6, Z7, Z8, Z9)

// Clear the sums Z0..Z(n-1) and Z6..Z(5+n).
#define ZZERO4 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9

#define ZZERO5 \
	ZZERO4 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z10, Z10, Z10

#define ZZERO6 \
	ZZERO5 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z11, Z11, Z11

// Row s of the tile is s + t; add it into C at DX (set: write it over C),
// and step to the next row.
#define ZROW(s, t) \
	VADDPS t, s, s \
	TESTQ  BX, BX \
	JNE    2(PC) \
	VADDPS (DX), s, s \
	VMOVUPS s, (DX) \
	ADDQ   R8, DX

#define ZSTORE4 \
	MOVBLZX set+80(FP), BX \
	ZROW(Z0, Z6) \
	ZROW(Z1, Z7) \
	ZROW(Z2, Z8) \
	ZROW(Z3, Z9)

// An AVX-512 tile kernel up to its last rows' stores: TOUCH the C tile,
// clear the sums (ZERO), run the k loop with steps S and T, and store the
// top four rows.
#define ZTILE(TOUCH, ZERO, S, T) \
	TILE_ARGS \
	TOUCH \
	ZERO \
	TILE_LOOP(S, T, T, 64, 128, 192, 256) \
store: \
	ZSTORE4

// func tile6x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile6x16Z(SB), NOSPLIT, $0-128
	ZTILE(TOUCH6, ZZERO6, Z6S, Z6T)
	ZROW(Z4, Z10)
	ZROW(Z5, Z11)
	VZEROUPPER
	RET

// func tile5x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile5x16Z(SB), NOSPLIT, $0-128
	ZTILE(TOUCH5, ZZERO5, Z5S, Z5T)
	ZROW(Z4, Z10)
	VZEROUPPER
	RET

// func tile4x16Z(k int, a *float32, rs, cs int, b, c *float32, ldc int, next *float32, poff, pstep int, set bool, a2 *float32, rs2, cs2 int, b2 *float32, k2 int)
TEXT ·tile4x16Z(SB), NOSPLIT, $0-128
	ZTILE(TOUCH4, ZZERO4, Z4S, Z4T)
	VZEROUPPER
	RET

// Horizontal sum of Y reg into the low lane of X reg (clobbers X13).
#define HSUM(y, x) \
	VEXTRACTF128 $1, y, X13 \
	VADDPS X13, x, x \
	VHADDPS x, x, x \
	VHADDPS x, x, x

// func dot4AVX(k int, x, w *float32, ldw int, out *[4]float32)
TEXT ·dot4AVX(SB), NOSPLIT, $0-40
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), R8
	SHLQ $2, R8
	LEAQ (DI)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	ZERO8
	XORQ AX, AX
	MOVQ CX, BX
	ANDQ $-16, BX

d4loop16:
	CMPQ AX, BX
	JGE  d4loop8
	VMOVUPS (SI)(AX*4), Y8
	VMOVUPS 32(SI)(AX*4), Y9
	VFMADD231PS (DI)(AX*4), Y8, Y0
	VFMADD231PS (R9)(AX*4), Y8, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS (R11)(AX*4), Y8, Y3
	VFMADD231PS 32(DI)(AX*4), Y9, Y4
	VFMADD231PS 32(R9)(AX*4), Y9, Y5
	VFMADD231PS 32(R10)(AX*4), Y9, Y6
	VFMADD231PS 32(R11)(AX*4), Y9, Y7
	ADDQ $16, AX
	JMP  d4loop16

d4loop8:
	MOVQ CX, BX
	ANDQ $-8, BX
	CMPQ AX, BX
	JGE  d4reduce
	VMOVUPS (SI)(AX*4), Y8
	VFMADD231PS (DI)(AX*4), Y8, Y0
	VFMADD231PS (R9)(AX*4), Y8, Y1
	VFMADD231PS (R10)(AX*4), Y8, Y2
	VFMADD231PS (R11)(AX*4), Y8, Y3
	ADDQ $8, AX

d4reduce:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	HSUM(Y0, X0)
	HSUM(Y1, X1)
	HSUM(Y2, X2)
	HSUM(Y3, X3)

d4tail:
	CMPQ AX, CX
	JGE  d4done
	VMOVSS (SI)(AX*4), X8
	VFMADD231SS (DI)(AX*4), X8, X0
	VFMADD231SS (R9)(AX*4), X8, X1
	VFMADD231SS (R10)(AX*4), X8, X2
	VFMADD231SS (R11)(AX*4), X8, X3
	INCQ AX
	JMP  d4tail

d4done:
	MOVQ out+32(FP), DX
	VMOVSS X0, (DX)
	VMOVSS X1, 4(DX)
	VMOVSS X2, 8(DX)
	VMOVSS X3, 12(DX)
	VZEROUPPER
	RET

// func dotAVX(k int, x, y *float32) float32
TEXT ·dotAVX(SB), NOSPLIT, $0-28
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX
	MOVQ CX, BX
	ANDQ $-32, BX

dloop32:
	CMPQ AX, BX
	JGE  dloop8
	VMOVUPS (SI)(AX*4), Y4
	VMOVUPS 32(SI)(AX*4), Y5
	VMOVUPS 64(SI)(AX*4), Y6
	VMOVUPS 96(SI)(AX*4), Y7
	VFMADD231PS (DI)(AX*4), Y4, Y0
	VFMADD231PS 32(DI)(AX*4), Y5, Y1
	VFMADD231PS 64(DI)(AX*4), Y6, Y2
	VFMADD231PS 96(DI)(AX*4), Y7, Y3
	ADDQ $32, AX
	JMP  dloop32

dloop8:
	MOVQ CX, BX
	ANDQ $-8, BX

dloop8b:
	CMPQ AX, BX
	JGE  dreduce
	VMOVUPS (SI)(AX*4), Y4
	VFMADD231PS (DI)(AX*4), Y4, Y0
	ADDQ $8, AX
	JMP  dloop8b

dreduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0)

dtail:
	CMPQ AX, CX
	JGE  ddone
	VMOVSS (SI)(AX*4), X4
	VFMADD231SS (DI)(AX*4), X4, X0
	INCQ AX
	JMP  dtail

ddone:
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func dots4x2AVX(k int, x0, x1, w *float32, ldw, quads int, alpha float32, c0, c1 *float32)
// For the 4·quads rows w_j = w + j·ldw: c0[j] += alpha·(x0·w_j) and
// c1[j] += alpha·(x1·w_j), four rows at a time. k must be a multiple of 8.
// One call walks every quad: called per quad, with its scaling and adding
// into C in Go, the calls and the Go around them took half of decode
// attention's score products (2 query rows against 64 keys of 64).
TEXT ·dots4x2AVX(SB), NOSPLIT, $0-72
	MOVQ k+0(FP), CX
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), BX
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), R8
	SHLQ $2, R8
	MOVQ quads+40(FP), R13
	VBROADCASTSS alpha+48(FP), Y14
	MOVQ c0+56(FP), DX
	MOVQ c1+64(FP), R12
	LEAQ (R8)(R8*1), R14
	ADDQ R14, R14 // 4·ldw bytes: from one quad's rows to the next's

d42quad:
	TESTQ R13, R13
	JEQ   d42done
	LEAQ  (DI)(R8*1), R9
	LEAQ  (R9)(R8*1), R10
	LEAQ  (R10)(R8*1), R11
	ZERO8
	XORQ  AX, AX

d42loop:
	CMPQ AX, CX
	JGE  d42reduce
	VMOVUPS (SI)(AX*4), Y8
	VMOVUPS (BX)(AX*4), Y9
	VMOVUPS (DI)(AX*4), Y10
	VMOVUPS (R9)(AX*4), Y11
	VMOVUPS (R10)(AX*4), Y12
	VMOVUPS (R11)(AX*4), Y13
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y12, Y8, Y2
	VFMADD231PS Y13, Y8, Y3
	VFMADD231PS Y10, Y9, Y4
	VFMADD231PS Y11, Y9, Y5
	VFMADD231PS Y12, Y9, Y6
	VFMADD231PS Y13, Y9, Y7
	ADDQ $8, AX
	JMP  d42loop

// The eight sums reduce together: pairwise horizontal adds leave each
// 128-bit half holding four partial sums, and adding the halves gives all
// eight in one register (8 instructions where eight HSUMs took 32): x0's
// four in the low half, x1's in the high.
d42reduce:
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0 // per half: the sums of Y0..Y3 over that half
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4 // likewise for Y4..Y7
	VPERM2F128 $0x20, Y4, Y0, Y1 // low halves
	VPERM2F128 $0x31, Y4, Y0, Y2 // high halves
	VADDPS Y2, Y1, Y1
	VMULPS Y14, Y1, Y1
	VMOVUPS (DX), X2
	VADDPS  X1, X2, X2
	VMOVUPS X2, (DX)
	VEXTRACTF128 $1, Y1, X3
	VMOVUPS (R12), X4
	VADDPS  X3, X4, X4
	VMOVUPS X4, (R12)
	ADDQ $16, DX
	ADDQ $16, R12
	ADDQ R14, DI
	DECQ R13
	JMP  d42quad

d42done:
	VZEROUPPER
	RET

// func axpyAVX(n int, alpha float32, x, y *float32)  y += alpha·x, n a multiple of 8
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	VBROADCASTSS alpha+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ y+24(FP), DI
	XORQ AX, AX

axloop:
	CMPQ AX, CX
	JGE  axdone
	VMOVUPS (DI)(AX*4), Y1
	VFMADD231PS (SI)(AX*4), Y0, Y1
	VMOVUPS Y1, (DI)(AX*4)
	ADDQ $8, AX
	JMP  axloop

axdone:
	VZEROUPPER
	RET

// func gemv16AVX(k int, x, panel, y *float32)
// y[0:16] += Σ_p x[p]·panel[p·16 : p·16+16]; k a multiple of 4.
TEXT ·gemv16AVX(SB), NOSPLIT, $0-32
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ panel+16(FP), DI
	MOVQ y+24(FP), DX
	ZERO8
	SHRQ $2, CX
	JE   g16store

g16loop:
	VBROADCASTSS (SI), Y8
	VBROADCASTSS 4(SI), Y9
	VBROADCASTSS 8(SI), Y10
	VBROADCASTSS 12(SI), Y11
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS 64(DI), Y9, Y2
	VFMADD231PS 96(DI), Y9, Y3
	VFMADD231PS 128(DI), Y10, Y4
	VFMADD231PS 160(DI), Y10, Y5
	VFMADD231PS 192(DI), Y11, Y6
	VFMADD231PS 224(DI), Y11, Y7
	ADDQ $16, SI
	ADDQ $256, DI
	DECQ CX
	JNZ  g16loop

g16store:
	ADD16STORE
	VZEROUPPER
	RET

// func gemv64AVX(k int, x, panels *float32, stride int, y *float32)
// y[16i : 16i+16] += Σ_p x[p]·panel_i[p·16 : p·16+16] for the four panels at
// panels + i·stride bytes. Four read streams at once: one stream alone draws
// about a fifth less bandwidth from memory than several in flight.
TEXT ·gemv64AVX(SB), NOSPLIT, $0-40
	MOVQ k+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ panels+16(FP), DI
	MOVQ stride+24(FP), R11
	MOVQ y+32(FP), DX
	LEAQ (R11)(R11*2), R12
	ZERO8
	TESTQ CX, CX
	JE   g64store

g64loop:
	VBROADCASTSS (SI), Y8
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS (DI)(R11*1), Y8, Y2
	VFMADD231PS 32(DI)(R11*1), Y8, Y3
	VFMADD231PS (DI)(R11*2), Y8, Y4
	VFMADD231PS 32(DI)(R11*2), Y8, Y5
	VFMADD231PS (DI)(R12*1), Y8, Y6
	VFMADD231PS 32(DI)(R12*1), Y8, Y7
	ADDQ $4, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  g64loop

g64store:
	ADD64STORE
	VZEROUPPER
	RET

// func rowStrip64AVX(k int, alpha float32, a, b *float32, ldb int, c *float32)
// c[0:64] += alpha·Σ_{p<k} a[p]·b[p·ldb : p·ldb+64], with the 64 sums held in
// registers (an axpy per p would load and store c k times).
TEXT ·rowStrip64AVX(SB), NOSPLIT, $0-48
	STRIP_ARGS
	ZERO8

strip64:
	VBROADCASTSS (SI), Y8
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS 64(DI), Y8, Y2
	VFMADD231PS 96(DI), Y8, Y3
	VFMADD231PS 128(DI), Y8, Y4
	VFMADD231PS 160(DI), Y8, Y5
	VFMADD231PS 192(DI), Y8, Y6
	VFMADD231PS 224(DI), Y8, Y7
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ  strip64

	VBROADCASTSS alpha+8(FP), Y15
	VFMADD213PS (DX), Y15, Y0
	VFMADD213PS 32(DX), Y15, Y1
	VFMADD213PS 64(DX), Y15, Y2
	VFMADD213PS 96(DX), Y15, Y3
	VFMADD213PS 128(DX), Y15, Y4
	VFMADD213PS 160(DX), Y15, Y5
	VFMADD213PS 192(DX), Y15, Y6
	VFMADD213PS 224(DX), Y15, Y7
	STORE8
	VZEROUPPER
	RET

// One row of rows8x8AVX's k step: acc += a[row]·Y8 (a row of B).
#define ROW88(arow, t, acc) \
	VBROADCASTSS arow, t \
	VFMADD231PS Y8, t, acc

// One row of C in rows8x8AVX: c = alpha (Y15)·acc + c.
#define ADDC88(crow, acc) \
	VFMADD213PS crow, Y15, acc \
	VMOVUPS acc, crow

// func rows8x8AVX(k int, alpha float32, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
// For the eight rows i: c[i·ldc : i·ldc+8] += alpha·Σ_{p<k} a[i·lda+p]·
// b[p·ldb : p·ldb+8], k ≥ 1. A block of few-row products whose B is under
// 64 columns wide (attention's p·v at small head dims, LoRA's thin u·Bᵀ):
// row by row, eight columns at a time, they cost a call per row and strip.
TEXT ·rows8x8AVX(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), CX
	MOVQ a+16(FP), SI
	MOVQ lda+24(FP), R11
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12 // 3·lda bytes
	LEAQ (SI)(R11*4), BX   // row 4
	MOVQ b+32(FP), DI
	MOVQ ldb+40(FP), R8
	SHLQ $2, R8
	ZERO8

r88loop:
	VMOVUPS (DI), Y8
	ROW88((SI), Y9, Y0)
	ROW88((SI)(R11*1), Y10, Y1)
	ROW88((SI)(R11*2), Y11, Y2)
	ROW88((SI)(R12*1), Y12, Y3)
	ROW88((BX), Y9, Y4)
	ROW88((BX)(R11*1), Y10, Y5)
	ROW88((BX)(R11*2), Y11, Y6)
	ROW88((BX)(R12*1), Y12, Y7)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ R8, DI
	DECQ CX
	JNZ  r88loop

	VBROADCASTSS alpha+8(FP), Y15
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R10
	SHLQ $2, R10
	LEAQ (R10)(R10*2), R12
	LEAQ (DX)(R10*4), BX
	ADDC88((DX), Y0)
	ADDC88((DX)(R10*1), Y1)
	ADDC88((DX)(R10*2), Y2)
	ADDC88((DX)(R12*1), Y3)
	ADDC88((BX), Y4)
	ADDC88((BX)(R10*1), Y5)
	ADDC88((BX)(R10*2), Y6)
	ADDC88((BX)(R12*1), Y7)
	VZEROUPPER
	RET

// func rowStrip8AVX(k int, alpha float32, a, b *float32, ldb int, c *float32)
// c[0:8] += alpha·Σ_{p<k} a[p]·b[p·ldb : p·ldb+8]: rowStrip64AVX for the
// columns after the last 64 (attention's p·v at head dims 8 to 56). Even and
// odd p add into two registers, so that the FMA chain is half as long.
TEXT ·rowStrip8AVX(SB), NOSPLIT, $0-48
	STRIP_ARGS
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ CX, BX
	SHRQ $1, BX
	JE   strip8odd

strip8:
	VBROADCASTSS (SI), Y8
	VFMADD231PS (DI), Y8, Y0
	VBROADCASTSS 4(SI), Y9
	VFMADD231PS (DI)(R8*1), Y9, Y1
	ADDQ $8, SI
	LEAQ (DI)(R8*2), DI
	DECQ BX
	JNZ  strip8

strip8odd:
	TESTQ $1, CX
	JE    strip8done
	VBROADCASTSS (SI), Y8
	VFMADD231PS (DI), Y8, Y0

strip8done:
	VADDPS Y1, Y0, Y0
	VBROADCASTSS alpha+8(FP), Y15
	VFMADD213PS (DX), Y15, Y0
	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func gemv16BF16AVX(k int, x *float32, panel *uint16, y *float32)
TEXT ·gemv16BF16AVX(SB), NOSPLIT, $0-32
	GEMV16_HALF(BF16)

// func gemv64BF16AVX(k int, x *float32, panels *uint16, stride int, y *float32)
TEXT ·gemv64BF16AVX(SB), NOSPLIT, $0-40
	GEMV64_HALF(BF16)

// func widenBF16AVX(n int, src *uint16, dst *float32)
TEXT ·widenBF16AVX(SB), NOSPLIT, $0-24
	WIDEN_HALF(BF16)

// func gemv16F16AVX(k int, x *float32, panel *uint16, y *float32)
TEXT ·gemv16F16AVX(SB), NOSPLIT, $0-32
	GEMV16_HALF(F16)

// func gemv64F16AVX(k int, x *float32, panels *uint16, stride int, y *float32)
TEXT ·gemv64F16AVX(SB), NOSPLIT, $0-40
	GEMV64_HALF(F16)

// func widenF16AVX(n int, src *uint16, dst *float32)
TEXT ·widenF16AVX(SB), NOSPLIT, $0-24
	WIDEN_HALF(F16)
