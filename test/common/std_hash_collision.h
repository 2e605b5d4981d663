// SPDX-License-Identifier: Apache-2.0
// Test support: two strings of equal length and equal std::hash, built on purpose.
//
// libstdc++'s std::hash<std::string> is _Hash_bytes: MurmurHash64A with the public seed
// 0xc70f6907. Each 8-byte block step h = (h ^ f(k)) * m, with f(k) = g(k * m) * m and
// g(v) = v ^ (v >> 47), can be run backwards: m is odd, so it has an inverse mod 2^64, and
// g is its own inverse. So one block can be chosen to bring any state to any other.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ipmasq::test {

namespace stdhash {

constexpr uint64_t kMul = 0xc6a4a7935bd1e995ULL;
constexpr uint64_t kSeed = 0xc70f6907ULL;

constexpr uint64_t shiftMix(uint64_t v)
{
	return v ^ (v >> 47);
}

constexpr uint64_t inverseOfMul()
{
	uint64_t inverse = 1; // Newton's iteration: each step doubles the correct low bits
	for (int i = 0; i < 6; i++)
		inverse *= 2 - kMul * inverse;
	return inverse;
}
static_assert(kMul * inverseOfMul() == 1);

inline uint64_t load(const std::string &s, size_t at)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
	return v;
}

// The state after the first `blocks` 8-byte blocks of `s`.
inline uint64_t stateAfter(const std::string &s, size_t blocks)
{
	uint64_t h = kSeed ^ (s.size() * kMul);
	for (size_t b = 0; b < blocks; b++)
		h = (h ^ (shiftMix(load(s, 8 * b) * kMul) * kMul)) * kMul;
	return h;
}

} // namespace stdhash

// `variant` with its 8 bytes at `offset` (a multiple of 8) replaced so that its std::hash
// equals `original`'s. Both must have the same length and the same bytes after that block.
// nullopt when a byte needed is not `allowed` (the caller then varies `original`'s block).
inline std::optional<std::string> matchStdHash(const std::string &original, std::string variant,
					       size_t offset, const std::function<bool(char)> &allowed)
{
	using namespace stdhash;
	const size_t block = offset / 8;
	const uint64_t target = stateAfter(original, block + 1);
	const uint64_t mixed = (target * inverseOfMul()) ^ stateAfter(variant, block);
	const uint64_t k = shiftMix(mixed * inverseOfMul()) * inverseOfMul();
	for (size_t i = 0; i < 8; i++) {
		variant[offset + i] = static_cast<char>((k >> (8 * i)) & 0xff);
		if (!allowed(variant[offset + i]))
			return std::nullopt;
	}
	return variant;
}

} // namespace ipmasq::test
