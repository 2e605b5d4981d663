// SPDX-License-Identifier: Apache-2.0
// nf_tables' register file while a rule is decoded, byte by byte.
#include "ip-masq-agent/nft/codec/register_file.h"

namespace ipmasq::nft {

namespace {

std::optional<size_t> registerOffset(uint32_t reg, size_t len)
{
	size_t offset;
	if (reg >= NFT_REG_1 && reg <= NFT_REG_4)
		offset = reg * NFT_REG_SIZE;
	else if (reg >= NFT_REG32_00 && reg <= NFT_REG32_15)
		offset = NFT_REG_SIZE + (reg - NFT_REG32_00) * NFT_REG32_SIZE;
	else
		return std::nullopt;
	if (len > RegisterFile::kRegisterBytes - offset)
		return std::nullopt;
	return offset;
}

} // namespace

ValueId RegisterFile::define(ValueSource source, uint32_t len)
{
	const auto id = static_cast<ValueId>(rule_.values.size());
	rule_.values.push_back({std::move(source), len, static_cast<uint32_t>(rule_.statements.size())});
	return id;
}

bool RegisterFile::load(std::optional<uint32_t> dreg, ValueSource source, uint32_t len)
{
	const ValueId value = define(std::move(source), len);
	const size_t padded = (size_t(len) + 3) / 4 * 4;
	const auto offset = dreg ? registerOffset(*dreg, padded) : std::nullopt;
	if (!offset) {
		rule_.values.pop_back();
		return false;
	}
	for (size_t i = 0; i < padded; i++)
		regs_[*offset + i] = i < len ? RegisterByte{Slice::Kind::value, value, uint32_t(i)}
					     : RegisterByte{Slice::Kind::zero, 0, 0};
	return true;
}

std::optional<ReadId> RegisterFile::read(uint32_t reg, size_t len)
{
	const auto offset = registerOffset(reg, len);
	if (!offset)
		return std::nullopt;
	const auto first = static_cast<uint32_t>(rule_.slices.size());
	for (size_t i = 0; i < len; i++) {
		const RegisterByte &b = regs_[*offset + i];
		Slice *last = rule_.slices.size() > first ? &rule_.slices.back() : nullptr;
		if (last && last->kind == b.kind && last->value == b.value &&
		    (b.kind != Slice::Kind::value || last->offset + last->len == b.offset))
			last->len++;
		else
			rule_.slices.push_back({b.kind, b.value, b.offset, 1});
	}
	return addRead(first);
}

ReadId RegisterFile::whole(ValueId value)
{
	const auto first = static_cast<uint32_t>(rule_.slices.size());
	rule_.slices.push_back({Slice::Kind::value, value, 0, rule_.values[value].len});
	return addRead(first);
}

ReadId RegisterFile::addRead(uint32_t first)
{
	rule_.reads.emplace_back(first, static_cast<uint32_t>(rule_.slices.size()) - first);
	return static_cast<ReadId>(rule_.reads.size() - 1);
}

ReadId RegisterFile::constant(Bytes bytes)
{
	const auto len = static_cast<uint32_t>(bytes.size());
	return whole(define(Constant{std::move(bytes)}, len));
}

} // namespace ipmasq::nft
