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

// func expAVX(dst, src *float32, n int)  (n a multiple of 8)
TEXT ·expAVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS expc<>+0(SB), Y15  // log2e
	VBROADCASTSS expc<>+4(SB), Y14  // ln2hi
	VBROADCASTSS expc<>+8(SB), Y13  // ln2lo
	VBROADCASTSS expc<>+12(SB), Y12 // hi bound
	VBROADCASTSS expc<>+16(SB), Y11 // lo bound
	VBROADCASTSS expc<>+20(SB), Y10 // 1
	VBROADCASTSS expc<>+24(SB), Y9  // 1/2
	VBROADCASTSS expc<>+28(SB), Y8  // 1/6
	VBROADCASTSS expc<>+32(SB), Y7  // 1/24
	VBROADCASTSS expc<>+36(SB), Y6  // 1/120
	VBROADCASTSS expc<>+40(SB), Y5  // 1/720
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	VMOVUPS (SI)(AX*4), Y0           // x
	VMINPS Y12, Y0, Y1               // clamp high
	VMAXPS Y11, Y1, Y1               // clamp low
	VMOVAPS Y9, Y2
	VFMADD231PS Y15, Y1, Y2          // x*log2e + 0.5
	VROUNDPS $1, Y2, Y2              // n = floor(...)
	VFNMADD231PS Y14, Y2, Y1         // r = x - n*ln2hi
	VFNMADD231PS Y13, Y2, Y1         // r -= n*ln2lo
	VMOVAPS Y5, Y3                   // p = 1/720
	VFMADD213PS Y6, Y1, Y3           // p = p*r + 1/120
	VFMADD213PS Y7, Y1, Y3           // p = p*r + 1/24
	VFMADD213PS Y8, Y1, Y3           // p = p*r + 1/6
	VFMADD213PS Y9, Y1, Y3           // p = p*r + 1/2
	VFMADD213PS Y10, Y1, Y3          // p = p*r + 1
	VFMADD213PS Y10, Y1, Y3          // p = p*r + 1
	VCVTPS2DQ Y2, Y2                 // n as int32
	VPSLLD $23, Y2, Y2
	VPADDD Y2, Y3, Y3                // p * 2^n
	VCMPPS $1, Y11, Y0, Y4           // x < lo bound: 0
	VANDNPS Y3, Y4, Y3
	VCMPPS $14, Y12, Y0, Y4          // x > hi bound: +Inf
	VBROADCASTSS expc<>+44(SB), Y2
	VBLENDVPS Y4, Y2, Y3, Y3
	VCMPPS $3, Y0, Y0, Y4            // NaN in, NaN out
	VBLENDVPS Y4, Y0, Y3, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ $8, AX
	JMP  loop

done:
	VZEROUPPER
	RET

// func expShiftSumAVX(x *float32, n int, shift float32) float64  (n a multiple of 8)
// x[i] = e^(x[i] − shift) in place, returning Σ x[i] summed in float64. The
// exp is expAVX's; two of its constants come from memory each step so that
// shift and two float64 sums fit in the registers.
TEXT ·expShiftSumAVX(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS shift+16(FP), Y5
	VBROADCASTSS expc<>+0(SB), Y15  // log2e
	VBROADCASTSS expc<>+4(SB), Y14  // ln2hi
	VBROADCASTSS expc<>+8(SB), Y13  // ln2lo
	VBROADCASTSS expc<>+12(SB), Y12 // hi bound
	VBROADCASTSS expc<>+16(SB), Y11 // lo bound
	VBROADCASTSS expc<>+20(SB), Y10 // 1
	VBROADCASTSS expc<>+24(SB), Y9  // 1/2
	VBROADCASTSS expc<>+28(SB), Y8  // 1/6
	VXORPD Y6, Y6, Y6                // sums of the low and high lanes
	VXORPD Y7, Y7, Y7
	XORQ AX, AX

sloop:
	CMPQ AX, CX
	JGE  sdone
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS Y5, Y0, Y0                // x − shift
	VMINPS Y12, Y0, Y1
	VMAXPS Y11, Y1, Y1
	VMOVAPS Y9, Y2
	VFMADD231PS Y15, Y1, Y2
	VROUNDPS $1, Y2, Y2
	VFNMADD231PS Y14, Y2, Y1
	VFNMADD231PS Y13, Y2, Y1
	VBROADCASTSS expc<>+40(SB), Y3   // p = 1/720
	VBROADCASTSS expc<>+36(SB), Y4
	VFMADD213PS Y4, Y1, Y3           // p = p*r + 1/120
	VBROADCASTSS expc<>+32(SB), Y4
	VFMADD213PS Y4, Y1, Y3           // p = p*r + 1/24
	VFMADD213PS Y8, Y1, Y3
	VFMADD213PS Y9, Y1, Y3
	VFMADD213PS Y10, Y1, Y3
	VFMADD213PS Y10, Y1, Y3
	VCVTPS2DQ Y2, Y2
	VPSLLD $23, Y2, Y2
	VPADDD Y2, Y3, Y3
	VCMPPS $1, Y11, Y0, Y4
	VANDNPS Y3, Y4, Y3
	VCMPPS $14, Y12, Y0, Y4
	VBROADCASTSS expc<>+44(SB), Y2
	VBLENDVPS Y4, Y2, Y3, Y3
	VCMPPS $3, Y0, Y0, Y4
	VBLENDVPS Y4, Y0, Y3, Y3
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
	MOVSD X6, ret+24(FP)
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
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET
