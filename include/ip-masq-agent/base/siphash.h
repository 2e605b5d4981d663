// SPDX-License-Identifier: Apache-2.0
// SipHash-2-4 with a 128-bit output and a per-process random key: a digest of config
// content that no one can aim a collision at.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ipmasq {

// The reference SipHash-2-4 (Aumasson and Bernstein), 128-bit output variant, fed in
// pieces. With a key the writer of the input does not know, two inputs of equal digest
// cannot be built on purpose (std::hash, a fixed and public 64-bit function, can be
// inverted block by block).
class SipHash128
{
public:
	using Key = std::array<uint8_t, 16>;
	using Digest = std::array<uint64_t, 2>;

	explicit SipHash128(const Key &key);

	// Feeds bytes; pieces of any size give the digest of their concatenation.
	void update(std::string_view bytes);
	// Feeds the length first: a sequence of fields cannot be read two ways.
	void updateField(std::string_view field);
	Digest finish() const;

	// This process's key: 16 bytes from getrandom(), drawn at the first call.
	static const Key &processKey();

private:
	void compress(uint64_t block);

	uint64_t v0_, v1_, v2_, v3_;
	uint64_t tail_ = 0;      // the bytes of an incomplete block, little-endian
	size_t tailBytes_ = 0;
	uint64_t length_ = 0;    // bytes fed so far (the last byte of the padding is mod 256)
};

} // namespace ipmasq
