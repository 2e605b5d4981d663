// SPDX-License-Identifier: Apache-2.0
// SipHash-2-4-128 and the per-process key it is used with.
#include "ip-masq-agent/base/siphash.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sys/random.h>
#include <unistd.h>

namespace ipmasq {

namespace {

constexpr uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

uint64_t load64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

void sipRound(uint64_t &v0, uint64_t &v1, uint64_t &v2, uint64_t &v3)
{
	v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
	v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
	v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
	v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
}

SipHash128::Key drawKey()
{
	SipHash128::Key key{};
	size_t got = 0;
	// getrandom() blocks only until the kernel's pool is initialised, once per boot. A
	// bounded number of tries: EINTR is the only error worth another.
	for (int tries = 0; got < key.size() && tries < 16; tries++) {
		const ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
		if (n > 0)
			got += static_cast<size_t>(n);
		else if (errno != EINTR)
			break;
	}
	if (got == key.size())
		return key;
	// No getrandom() (a kernel before 3.17): the key is still unknown to a config's
	// author, who would have to guess the start time to the nanosecond and the pid.
	const uint64_t a = static_cast<uint64_t>(
		std::chrono::steady_clock::now().time_since_epoch().count());
	const uint64_t b = static_cast<uint64_t>(
		std::chrono::system_clock::now().time_since_epoch().count()) ^
		(static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(&key);
	std::memcpy(key.data(), &a, 8);
	std::memcpy(key.data() + 8, &b, 8);
	return key;
}

} // namespace

SipHash128::SipHash128(const Key &key)
{
	const uint64_t k0 = load64(key.data());
	const uint64_t k1 = load64(key.data() + 8);
	v0_ = 0x736f6d6570736575ULL ^ k0;
	v1_ = 0x646f72616e646f6dULL ^ k1 ^ 0xee; // 0xee: the 128-bit output variant
	v2_ = 0x6c7967656e657261ULL ^ k0;
	v3_ = 0x7465646279746573ULL ^ k1;
}

void SipHash128::compress(uint64_t block)
{
	v3_ ^= block;
	sipRound(v0_, v1_, v2_, v3_);
	sipRound(v0_, v1_, v2_, v3_);
	v0_ ^= block;
}

void SipHash128::update(std::string_view bytes)
{
	const auto *p = reinterpret_cast<const uint8_t *>(bytes.data());
	size_t n = bytes.size();
	length_ += n;
	while (n > 0 && tailBytes_ != 0) {
		tail_ |= static_cast<uint64_t>(*p++) << (8 * tailBytes_);
		n--;
		if (++tailBytes_ == 8) {
			compress(tail_);
			tail_ = 0;
			tailBytes_ = 0;
		}
	}
	for (; n >= 8; p += 8, n -= 8)
		compress(load64(p));
	for (; n > 0; n--)
		tail_ |= static_cast<uint64_t>(*p++) << (8 * tailBytes_++);
}

void SipHash128::updateField(std::string_view field)
{
	uint8_t length[8];
	uint64_t size = field.size();
	for (uint8_t &byte : length) {
		byte = static_cast<uint8_t>(size);
		size >>= 8;
	}
	update(std::string_view(reinterpret_cast<const char *>(length), sizeof(length)));
	update(field);
}

SipHash128::Digest SipHash128::finish() const
{
	uint64_t v0 = v0_, v1 = v1_, v2 = v2_, v3 = v3_;
	const uint64_t last = (length_ << 56) | tail_;
	v3 ^= last;
	sipRound(v0, v1, v2, v3);
	sipRound(v0, v1, v2, v3);
	v0 ^= last;
	v2 ^= 0xee;
	for (int i = 0; i < 4; i++)
		sipRound(v0, v1, v2, v3);
	const uint64_t first = v0 ^ v1 ^ v2 ^ v3;
	v1 ^= 0xdd;
	for (int i = 0; i < 4; i++)
		sipRound(v0, v1, v2, v3);
	return {first, v0 ^ v1 ^ v2 ^ v3};
}

const SipHash128::Key &SipHash128::processKey()
{
	static const Key key = drawKey();
	return key;
}

} // namespace ipmasq
