// SPDX-License-Identifier: Apache-2.0
// outputAddress and interface patterns: parsing, and interface names as nftables' keys.
#include "ip-masq-agent/model/egress.h"

#include <algorithm>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

constexpr unsigned kInterfaceKeyBytes = kMaxInterfaceNameLength + 1;
static_assert(kInterfaceKeyBytes * 8 == 128, "an interface key fills a 128-bit value");

// What Linux's dev_valid_name() and nft's quoting refuse in a name.
bool isNameByte(char c)
{
	const auto byte = static_cast<unsigned char>(c);
	return byte > 0x20 && byte < 0x7f && c != '/' && c != ':' && c != '"' && c != '\\';
}

// The key of a name: its bytes from the top of the 128-bit value down, zero-padded.
AddressValue keyOf(std::string_view name)
{
	AddressValue key = 0;
	for (unsigned i = 0; i < kInterfaceKeyBytes; i++)
		key = (key << 8) | (i < name.size() ? static_cast<unsigned char>(name[i]) : 0);
	return key;
}

// The bytes of a key up to its first NUL.
std::string nameOf(AddressValue key, unsigned bytes)
{
	std::string name;
	for (unsigned i = 0; i < bytes; i++) {
		const auto byte = static_cast<char>((key >> (8 * (kInterfaceKeyBytes - 1 - i))) & 0xff);
		if (byte == '\0')
			break;
		name += byte;
	}
	return name;
}

AddressValue lowBits(unsigned bytes)
{
	return bytes >= kInterfaceKeyBytes ? ~AddressValue(0) : (AddressValue(1) << (8 * bytes)) - 1;
}

} // namespace

Result<InterfacePattern> parseInterfacePattern(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("{} is not an interface name: {}", quoted(text), why));
	};
	InterfacePattern pattern;
	std::string_view name = text;
	if (!name.empty() && (name.back() == '*' || name.back() == '+')) {
		pattern.wildcard = true;
		name.remove_suffix(1);
		if (name.empty())
			return invalid("a wildcard alone matches every interface; leave the key out "
				       "instead");
	}
	if (name.empty())
		return invalid("it is empty");
	if (name.size() > kMaxInterfaceNameLength)
		return invalid(fmt::format("{} bytes, but Linux names have at most {}", name.size(),
					   kMaxInterfaceNameLength));
	if (name == "." || name == "..")
		return invalid("Linux refuses it as a name");
	if (name.find_first_of("*+") != std::string_view::npos)
		return invalid("a wildcard (\"*\" or \"+\") may only end a name, as in \"eth*\"");
	if (!std::all_of(name.begin(), name.end(), isNameByte))
		return invalid("names have no spaces, \"/\", \":\", quotes, backslashes or control "
			       "characters");
	pattern.name = std::string(name);
	return pattern;
}

bool matchesInterface(const InterfacePattern &pattern, std::string_view name)
{
	return pattern.wildcard ? name.starts_with(pattern.name) : name == pattern.name;
}

AddressRange interfaceKeyRange(const InterfacePattern &pattern)
{
	const AddressValue first = keyOf(pattern.name);
	const AddressValue last =
		pattern.wildcard ? first | lowBits(kInterfaceKeyBytes - unsigned(pattern.name.size()))
				 : first;
	return AddressRange{Address{Family::ipv6, first}, Address{Family::ipv6, last}};
}

std::vector<InterfacePattern> interfacePatternsOf(const AddressRange &range)
{
	std::vector<InterfacePattern> out;
	AddressValue at = range.first.value;
	const AddressValue last = range.last.value;
	// Bounded: every block ends past the previous one, and a range of keys made of
	// patterns holds few blocks; the count also stops at the last key.
	for (;;) {
		// The largest block of whole trailing bytes that starts at `at` and fits.
		unsigned free = kInterfaceKeyBytes - 1; // a wildcard keeps at least one byte
		while (free > 0 && ((at & lowBits(free)) != 0 || (at | lowBits(free)) > last))
			free--;
		out.push_back(InterfacePattern{nameOf(at, kInterfaceKeyBytes - free), free > 0, {}});
		const AddressValue end = at | lowBits(free);
		if (end >= last)
			break;
		at = end + 1;
	}
	return out;
}

std::string OutputAddress::toString() const
{
	switch (form) {
	case Form::address: return range.first.toString();
	case Form::range: return range.first.toString() + "-" + range.last.toString();
	case Form::subnet: return fmt::format("{}/{}", range.first.toString(), prefixLength);
	}
	return {};
}

// iptables' --to-source takes "ADDRESS[-ADDRESS][:PORT[-PORT]]" ("[ADDRESS]:PORT" for
// IPv6), and a file written for upstream PR #103's fork, which passed outputAddress to it,
// may carry ports: an IPv4 address right before the first ':' can be nothing else.
namespace {

bool carriesPorts(std::string_view text)
{
	if (text.starts_with('['))
		return true;
	const size_t colon = text.find(':');
	if (colon == std::string_view::npos)
		return false;
	const std::string_view before = text.substr(0, colon);
	const size_t dash = before.rfind('-');
	auto address = parseAddress(dash == std::string_view::npos ? before : before.substr(dash + 1));
	return address && address->family == Family::ipv4;
}

} // namespace

Result<OutputAddress> parseOutputAddress(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("{} is not an address, a range or a CIDR: {}", quoted(text), why));
	};
	if (carriesPorts(text))
		return invalid("ports are not part of it (as in iptables' --to-source): write the "
			       "address alone, and the ports with the flag --to-ports");
	OutputAddress out;
	if (text.find('/') != std::string_view::npos) {
		auto prefix = parsePrefix(text);
		if (!prefix)
			return fail(prefix.error());
		out.form = OutputAddress::Form::subnet;
		out.range = AddressRange{prefix->first(), prefix->last()};
		out.prefixLength = prefix->length;
		return out;
	}
	const size_t dash = text.find('-');
	if (dash == std::string_view::npos) {
		auto address = parseAddress(text);
		if (!address)
			return invalid(address.error().message);
		out.range = AddressRange{*address, *address};
		return out;
	}
	auto first = parseAddress(text.substr(0, dash));
	auto last = parseAddress(text.substr(dash + 1));
	if (!first || !last)
		return invalid((first ? last : first).error().message);
	if (first->family != last->family)
		return invalid("a range's two ends must be of one family");
	if (last->value < first->value)
		return invalid(fmt::format("the range ends ({}) before it starts ({}); write the lower "
					   "address first", last->toString(), first->toString()));
	out.form = first->value == last->value ? OutputAddress::Form::address : OutputAddress::Form::range;
	out.range = AddressRange{*first, *last};
	return out;
}

} // namespace ipmasq
