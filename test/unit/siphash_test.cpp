// SPDX-License-Identifier: Apache-2.0
// SipHash-2-4-128 against the reference vectors, fed whole and in pieces.
#include <catch2/catch.hpp>

#include <string>

#include <fmt/format.h>

#include "ip-masq-agent/base/siphash.h"

using ipmasq::SipHash128;

namespace {

// The reference key 00 01 .. 0f and message 00 01 .. (len-1) of veorq/SipHash vectors.h.
SipHash128::Key referenceKey()
{
	SipHash128::Key key{};
	for (size_t i = 0; i < key.size(); i++)
		key[i] = static_cast<uint8_t>(i);
	return key;
}

std::string referenceMessage(size_t length)
{
	std::string message;
	for (size_t i = 0; i < length; i++)
		message += static_cast<char>(i);
	return message;
}

// The digest as vectors.h writes it: each 64-bit half little-endian, in hex.
std::string hex(const SipHash128::Digest &digest)
{
	std::string out;
	for (uint64_t half : digest)
		for (int byte = 0; byte < 8; byte++)
			out += fmt::format("{:02x}", (half >> (8 * byte)) & 0xff);
	return out;
}

} // namespace

TEST_CASE("SipHash-2-4-128 gives the reference vectors")
{
	const auto [length, expected] = GENERATE(table<size_t, std::string>({
		{0, "a3817f04ba25a8e66df67214c7550293"},
		{1, "da87c1d86b99af44347659119b22fc45"},
		{8, "3b62a9ba6258f5610f83e264f31497b4"},
		{62, "5853542321f567a005d547a4f04759bd"},
		{63, "5150d1772f50834a503e069a973fbd7c"},
	}));
	SipHash128 whole(referenceKey());
	whole.update(referenceMessage(length));
	CHECK(hex(whole.finish()) == expected);

	// Pieces of 1, 2, 3, ... bytes cross every block boundary differently.
	SipHash128 pieces(referenceKey());
	const std::string message = referenceMessage(length);
	for (size_t at = 0, step = 1; at < message.size(); at += step, step++)
		pieces.update(std::string_view(message).substr(at, step));
	CHECK(hex(pieces.finish()) == expected);
}

TEST_CASE("fields are length-prefixed: moving bytes between fields changes the digest")
{
	SipHash128 a(referenceKey()), b(referenceKey());
	a.updateField("ab");
	a.updateField("c");
	b.updateField("a");
	b.updateField("bc");
	CHECK(a.finish() != b.finish());
}

TEST_CASE("the process key is drawn once and is not all zeros")
{
	const SipHash128::Key &key = SipHash128::processKey();
	CHECK(&key == &SipHash128::processKey());
	CHECK(key != SipHash128::Key{});
}
