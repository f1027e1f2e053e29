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
