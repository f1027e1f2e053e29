//go:build amd64 && !purego

#include "textflag.h"

DATA expc<>+0(SB)/4, $0x3fb8aa3b   // log2(e)
DATA expc<>+4(SB)/4, $0x3f318000   // ln2 hi
DATA expc<>+8(SB)/4, $0xb95e8083   // ln2 lo
DATA expc<>+12(SB)/4, $0x42b17218  // 88.72283 (overflow bound)
DATA expc<>+16(SB)/4, $0xc2aeac50  // -87.33654 (underflow bound)
DATA expc<>+20(SB)/4, $0x3f800000  // 1
DATA expc<>+24(SB)/4, $0x3f000000  // 1/2
DATA expc<>+28(SB)/4, $0x3e2aaaab  // 1/6
DATA expc<>+32(SB)/4, $0x3d2aaaab  // 1/24
DATA expc<>+36(SB)/4, $0x3c088889  // 1/120
DATA expc<>+40(SB)/4, $0x3ab60b61  // 1/720
DATA expc<>+44(SB)/4, $0x7f800000  // +Inf
GLOBL expc<>(SB), RODATA|NOPTR, $48

// EXP sets Y3 = e^Y0 (expAVX's algorithm), given the constants loaded by
// EXPCONSTS (Y8..Y15); clobbers Y1, Y2, Y4. Three polynomial constants come
// from memory each time, leaving Y5..Y7 to the kernels.
#define EXPCONSTS \
	VBROADCASTSS expc<>+0(SB), Y15  /* log2e */ \
	VBROADCASTSS expc<>+4(SB), Y14  /* ln2hi */ \
	VBROADCASTSS expc<>+8(SB), Y13  /* ln2lo */ \
	VBROADCASTSS expc<>+12(SB), Y12 /* hi bound */ \
	VBROADCASTSS expc<>+16(SB), Y11 /* lo bound */ \
	VBROADCASTSS expc<>+20(SB), Y10 /* 1 */ \
	VBROADCASTSS expc<>+24(SB), Y9  /* 1/2 */ \
	VBROADCASTSS expc<>+28(SB), Y8  /* 1/6 */

#define EXP \
	VMINPS Y12, Y0, Y1               /* clamp high */ \
	VMAXPS Y11, Y1, Y1               /* clamp low */ \
	VMOVAPS Y9, Y2 \
	VFMADD231PS Y15, Y1, Y2          /* x*log2e + 0.5 */ \
	VROUNDPS $1, Y2, Y2              /* n = floor(...) */ \
	VFNMADD231PS Y14, Y2, Y1         /* r = x - n*ln2hi */ \
	VFNMADD231PS Y13, Y2, Y1         /* r -= n*ln2lo */ \
	VBROADCASTSS expc<>+40(SB), Y3   /* p = 1/720 */ \
	VBROADCASTSS expc<>+36(SB), Y4 \
	VFMADD213PS Y4, Y1, Y3           /* p = p*r + 1/120 */ \
	VBROADCASTSS expc<>+32(SB), Y4 \
	VFMADD213PS Y4, Y1, Y3           /* p = p*r + 1/24 */ \
	VFMADD213PS Y8, Y1, Y3           /* p = p*r + 1/6 */ \
	VFMADD213PS Y9, Y1, Y3           /* p = p*r + 1/2 */ \
	VFMADD213PS Y10, Y1, Y3          /* p = p*r + 1 */ \
	VFMADD213PS Y10, Y1, Y3          /* p = p*r + 1 */ \
	VCVTPS2DQ Y2, Y2                 /* n as int32 */ \
	VPSLLD $23, Y2, Y2 \
	VPADDD Y2, Y3, Y3                /* p * 2^n */ \
	VCMPPS $1, Y11, Y0, Y4           /* x < lo bound: 0 */ \
	VANDNPS Y3, Y4, Y3 \
	VCMPPS $14, Y12, Y0, Y4          /* x > hi bound: +Inf */ \
	VBROADCASTSS expc<>+44(SB), Y2 \
	VBLENDVPS Y4, Y2, Y3, Y3 \
	VCMPPS $3, Y0, Y0, Y4            /* NaN in, NaN out */ \
	VBLENDVPS Y4, Y0, Y3, Y3

// func expAVX(dst, src *float32, n int)  (n a multiple of 8)
TEXT ·expAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	VMOVUPS (SI)(AX*4), Y0
	EXP
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ $8, AX
	JMP  loop

done:
	VZEROUPPER
	RET

// func expShiftSumAVX(x *float32, n int, shift float32) float64  (n a multiple of 8)
// x[i] = e^(x[i] − shift) in place, returning Σ x[i] summed in float64.
TEXT ·expShiftSumAVX(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS shift+16(FP), Y5
	EXPCONSTS
	VXORPD Y6, Y6, Y6                // sums of the low and high lanes
	VXORPD Y7, Y7, Y7
	XORQ AX, AX

sloop:
	CMPQ AX, CX
	JGE  sdone
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS Y5, Y0, Y0                // x − shift
	EXP
	VMOVUPS Y3, (SI)(AX*4)
	VCVTPS2PD X3, Y0
	VADDPD Y0, Y6, Y6
	VEXTRACTF128 $1, Y3, X1
	VCVTPS2PD X1, Y1
	VADDPD Y1, Y7, Y7
	ADDQ $8, AX
	JMP  sloop

sdone:
	VADDPD Y7, Y6, Y6
	VEXTRACTF128 $1, Y6, X7
	VADDPD X7, X6, X6
	VHADDPD X6, X6, X6
	VMOVSD X6, ret+24(FP)
	VZEROUPPER
	RET

// SIGMOID sets Y3 = 1/(1 + e^−g) for g at (SI)(AX*4) (Y7 zero); EXP's
// registers.
#define SIGMOID \
	VSUBPS (SI)(AX*4), Y7, Y0 \
	EXP \
	VADDPS Y10, Y3, Y3 \
	VDIVPS Y3, Y10, Y3

// func swigluAVX(a, gt, u *float32, n int)  (n a multiple of 8)
// a = gt·σ(gt)·u (gt the gate); a may be gt.
TEXT ·swigluAVX(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), DI
	MOVQ gt+8(FP), SI
	MOVQ u+16(FP), DX
	MOVQ n+24(FP), CX
	EXPCONSTS
	VXORPS Y7, Y7, Y7
	XORQ AX, AX

gloop:
	CMPQ AX, CX
	JGE  gdone
	SIGMOID
	VMULPS (SI)(AX*4), Y3, Y3
	VMULPS (DX)(AX*4), Y3, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ $8, AX
	JMP  gloop

gdone:
	VZEROUPPER
	RET

// func swigluBackAVX(dg, du, da, gt, u *float32, n int)  (n a multiple of 8)
// With s = σ(gt): du = da·gt·s, dg = da·u·s·(1 + gt·(1 − s)).
TEXT ·swigluBackAVX(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), BX
	MOVQ da+16(FP), R8
	MOVQ gt+24(FP), SI
	MOVQ u+32(FP), DX
	MOVQ n+40(FP), CX
	EXPCONSTS
	VXORPS Y7, Y7, Y7
	XORQ AX, AX

bloop:
	CMPQ AX, CX
	JGE  bdone
	SIGMOID
	VMOVUPS (SI)(AX*4), Y5           // g
	VMULPS (R8)(AX*4), Y3, Y6        // da·s
	VMULPS Y5, Y6, Y1
	VMOVUPS Y1, (BX)(AX*4)           // du
	VSUBPS Y3, Y10, Y2               // 1 − s
	VFMADD213PS Y10, Y5, Y2          // 1 + g·(1 − s)
	VMULPS (DX)(AX*4), Y6, Y6
	VMULPS Y2, Y6, Y6
	VMOVUPS Y6, (DI)(AX*4)           // dg
	ADDQ $8, AX
	JMP  bloop

bdone:
	VZEROUPPER
	RET

// func maxAVX(x *float32, n int) float32  (n a multiple of 32)
// NaNs are not carried through; callers see them in the sums that follow.
TEXT ·maxAVX(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	XORQ AX, AX

mloop:
	CMPQ AX, CX
	JGE  mdone
	VMAXPS (SI)(AX*4), Y0, Y0
	VMAXPS 32(SI)(AX*4), Y1, Y1
	VMAXPS 64(SI)(AX*4), Y2, Y2
	VMAXPS 96(SI)(AX*4), Y3, Y3
	ADDQ $32, AX
	JMP  mloop

mdone:
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// Lane masks for a row's last 1-7 values: the 8 dwords at tailmask<>+4·(8−t)
// select the first t lanes.
DATA tailmask<>+0(SB)/4, $0xffffffff
DATA tailmask<>+4(SB)/4, $0xffffffff
DATA tailmask<>+8(SB)/4, $0xffffffff
DATA tailmask<>+12(SB)/4, $0xffffffff
DATA tailmask<>+16(SB)/4, $0xffffffff
DATA tailmask<>+20(SB)/4, $0xffffffff
DATA tailmask<>+24(SB)/4, $0xffffffff
DATA tailmask<>+28(SB)/4, $0xffffffff
DATA tailmask<>+32(SB)/4, $0
DATA tailmask<>+36(SB)/4, $0
DATA tailmask<>+40(SB)/4, $0
DATA tailmask<>+44(SB)/4, $0
DATA tailmask<>+48(SB)/4, $0
DATA tailmask<>+52(SB)/4, $0
DATA tailmask<>+56(SB)/4, $0
DATA tailmask<>+60(SB)/4, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

DATA neginf<>+0(SB)/4, $0xff800000
GLOBL neginf<>(SB), RODATA|NOPTR, $4

// TAILMASK loads into Y6 the mask of the first DX lanes (1 ≤ DX ≤ 7);
// clobbers R8 and R9.
#define TAILMASK \
	MOVQ $8, R8 \
	SUBQ DX, R8 \
	LEAQ tailmask<>(SB), R9 \
	VMOVUPS (R9)(R8*4), Y6

// TAILLOAD loads the row's last DX values (at (SI)(AX*4)) into Y0, −Inf in
// the other lanes; clobbers Y2, Y6 (the mask), R8, R9.
#define TAILLOAD \
	TAILMASK \
	VMASKMOVPS (SI)(AX*4), Y6, Y0 \
	VBROADCASTSS neginf<>(SB), Y2 \
	VBLENDVPS Y6, Y0, Y2, Y0

// func softmaxAVX(x *float32, n int) (mx float32, sum float64)  (n ≥ 1)
// The softmax of x in place, in three passes on the vector unit, the row's
// last n mod 8 values read through a masked load: its max, then
// e^(x − max) summed in float64, then the scaling by float32(1/sum). It
// returns the max and the sum, as normalize does. The tail's exps stay in
// Y3 until they are scaled and go out through the stack, one by one: a
// masked store is microcoded on AMD's cores, and its cost made attention
// over short rows slower than the scalar tail it replaced.
TEXT ·softmaxAVX(SB), NOSPLIT, $32-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ CX, DX
	ANDQ $7, DX                      // tail
	MOVQ CX, BX
	ANDQ $-8, BX                     // whole blocks
	VBROADCASTSS neginf<>(SB), Y5
	VMOVAPS Y5, Y6
	XORQ AX, AX
	MOVQ BX, R10
	ANDQ $-16, R10

xpairs:                                  // two blocks a step, two running maxes
	CMPQ AX, R10
	JGE  xlast
	VMAXPS (SI)(AX*4), Y5, Y5
	VMAXPS 32(SI)(AX*4), Y6, Y6
	ADDQ $16, AX
	JMP  xpairs

xlast:                                   // at most one whole block is left
	CMPQ AX, BX
	JGE  xtail
	VMAXPS (SI)(AX*4), Y5, Y5
	ADDQ $8, AX

xtail:
	VMAXPS Y6, Y5, Y5
	TESTQ DX, DX
	JE    xdone
	TAILLOAD
	VMAXPS Y0, Y5, Y5

xdone:
	VEXTRACTF128 $1, Y5, X1
	VMAXPS X1, X5, X5
	VPERMILPS $0x4e, X5, X1
	VMAXPS X1, X5, X5
	VPERMILPS $0xb1, X5, X1
	VMAXPS X1, X5, X5
	VMOVSS X5, mx+16(FP)
	VBROADCASTSS X5, Y5              // the shift
	EXPCONSTS
	VXORPD Y7, Y7, Y7                // the sum, four lanes of float64
	XORQ AX, AX

eloop:
	CMPQ AX, BX
	JGE  etail
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS Y5, Y0, Y0
	EXP
	VMOVUPS Y3, (SI)(AX*4)
	VCVTPS2PD X3, Y0
	VADDPD Y0, Y7, Y7
	VEXTRACTF128 $1, Y3, X1
	VCVTPS2PD X1, Y1
	VADDPD Y1, Y7, Y7
	ADDQ $8, AX
	JMP  eloop

etail:
	VXORPS Y3, Y3, Y3
	TESTQ DX, DX
	JE    edone
	TAILLOAD
	VSUBPS Y5, Y0, Y0
	EXP                              // −Inf lanes give 0
	VCVTPS2PD X3, Y0
	VADDPD Y0, Y7, Y7
	VEXTRACTF128 $1, Y3, X1
	VCVTPS2PD X1, Y1
	VADDPD Y1, Y7, Y7

edone:
	VEXTRACTF128 $1, Y7, X1
	VADDPD X1, X7, X7
	VHADDPD X7, X7, X7
	VMOVSD X7, sum+24(FP)
	MOVQ $0x3ff0000000000000, R8
	VMOVQ R8, X1
	VDIVSD X7, X1, X1                // 1/sum in float64
	VCVTSD2SS X1, X1, X1             // rounded to float32, as F(1/sum)
	VBROADCASTSS X1, Y1
	XORQ AX, AX

sloop:
	CMPQ AX, BX
	JGE  stail
	VMULPS (SI)(AX*4), Y1, Y0
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ $8, AX
	JMP  sloop

stail:
	TESTQ DX, DX
	JE    sdone2
	VMULPS Y3, Y1, Y3
	VMOVUPS Y3, (SP)
	XORQ R8, R8

tloop:
	MOVL (SP)(R8*4), R9
	MOVL R9, (SI)(AX*4)
	INCQ AX
	INCQ R8
	CMPQ R8, DX
	JL   tloop

sdone2:
	VZEROUPPER
	RET
