// SPDX-License-Identifier: Apache-2.0
// The userdata nft stores with a table, set, element, chain, rule or object.
#pragma once

#include <cstdint>
#include <new>
#include <string>

#include <libnftnl/udata.h>

#include "ip-masq-agent/netlink/handles.h"

namespace ipmasq::netlink {

// Userdata: nft's small TLV format (one byte type, one byte length) stored verbatim by
// the kernel. Built with libnftnl's encoder, then copied out as plain bytes.
class UserData
{
public:
	UserData() : buf_(nftnl_udata_buf_alloc(kCapacity))
	{
		if (!buf_)
			throw std::bad_alloc();
	}

	void putU32(uint8_t type, uint32_t value)
	{
		ok_ &= nftnl_udata_put_u32(buf_.get(), type, value);
	}
	void putString(uint8_t type, const std::string &value)
	{
		ok_ &= nftnl_udata_put_strz(buf_.get(), type, value.c_str());
	}
	nftnl_udata *nestStart(uint8_t type)
	{
		nftnl_udata *nest = nftnl_udata_nest_start(buf_.get(), type);
		ok_ &= nest != nullptr;
		return nest;
	}
	void nestEnd(nftnl_udata *nest)
	{
		if (nest)
			nftnl_udata_nest_end(buf_.get(), nest);
	}

	bool empty() const { return nftnl_udata_buf_len(buf_.get()) == 0; }
	// Only the comment can be long, and its length is checked before: a failed put
	// here is a bug, which the caller reports instead of sending truncated data.
	bool ok() const { return ok_; }
	const void *data() const { return nftnl_udata_buf_data(buf_.get()); }
	uint32_t size() const { return nftnl_udata_buf_len(buf_.get()); }

private:
	static constexpr uint32_t kCapacity = 512;
	UdataBufPtr buf_;
	bool ok_ = true;
};

} // namespace ipmasq::netlink
