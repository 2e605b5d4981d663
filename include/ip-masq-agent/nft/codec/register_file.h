// SPDX-License-Identifier: Apache-2.0
// nf_tables' register file while a rule is decoded: what each byte holds, so that a
// statement reads the values the rule computed (model.h), not registers.
#pragma once

#include <array>

#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/nft/codec/model.h"

namespace ipmasq::nft {

class RegisterFile
{
public:
	// The values defined and the reads made are recorded in `rule`.
	explicit RegisterFile(Rule &rule) : rule_(rule) {}

	// A value the rule computes at its next statement, in no register.
	ValueId define(ValueSource source, uint32_t len);
	// A value computed into `dreg` (its last 4-byte word padded with zeros); false, with
	// nothing defined, when it would write past the registers.
	bool load(std::optional<uint32_t> dreg, ValueSource source, uint32_t len);
	// `len` bytes from `reg` on, as the slices of values they hold; nullopt past the registers.
	std::optional<ReadId> read(uint32_t reg, size_t len);
	ReadId constant(Bytes bytes);
	ReadId whole(ValueId value);
	// After a statement that may do anything: nothing known in the registers.
	void forget() { regs_.fill({}); }

	// The verdict register's 16 bytes, then NFT_REG_1..4, which NFT_REG32_00..15
	// address in 4-byte steps (the kernel's nft_parse_register).
	static constexpr size_t kRegisterBytes = 16 + 4 * NFT_REG_SIZE;

private:
	ReadId addRead(uint32_t first);

	// What each byte of the register file holds.
	struct RegisterByte {
		Slice::Kind kind = Slice::Kind::unset;
		ValueId value = 0;
		uint32_t offset = 0;
	};

	Rule &rule_;
	std::array<RegisterByte, kRegisterBytes> regs_{};
};

} // namespace ipmasq::nft
