//go:build amd64 && !purego

#include "textflag.h"

// func sumSquaresAVX(x *float32, n int) float64  (n a multiple of 8)
// Σ x[i]², each square exact in float64 and summed there in four lanes ×
// four accumulators, as the scalar loop sums in float64.
TEXT ·sumSquaresAVX(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	MOVQ CX, DX
	ANDQ $-16, DX
	XORQ AX, AX

qloop:
	CMPQ AX, DX
	JGE  qtail
	VCVTPS2PD (SI)(AX*4), Y4
	VCVTPS2PD 16(SI)(AX*4), Y5
	VCVTPS2PD 32(SI)(AX*4), Y6
	VCVTPS2PD 48(SI)(AX*4), Y7
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1
	VFMADD231PD Y6, Y6, Y2
	VFMADD231PD Y7, Y7, Y3
	ADDQ $16, AX
	JMP  qloop

qtail:
	CMPQ AX, CX
	JGE  qdone
	VCVTPS2PD (SI)(AX*4), Y4
	VCVTPS2PD 16(SI)(AX*4), Y5
	VFMADD231PD Y4, Y4, Y0
	VFMADD231PD Y5, Y5, Y1

qdone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMulAVX(y, x, w *float32, n int, r float32)  (n a multiple of 8)
// y[i] = x[i]·r·w[i], in the scalar loop's order.
TEXT ·scaleMulAVX(SB), NOSPLIT, $0-36
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS r+32(FP), Y3
	XORQ AX, AX

mloop:
	CMPQ AX, CX
	JGE  mdone
	VMULPS (SI)(AX*4), Y3, Y0
	VMULPS (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP  mloop

mdone:
	VZEROUPPER
	RET
