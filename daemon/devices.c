// SPDX-License-Identifier: MIT
/*
 * list.devices: the RDMA devices and ports this node has, read through libibverbs. Machines
 * without RDMA (no device, or a kernel without it) get an empty list and the reason.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "xferd.h"

static const char *link_layer_name(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_INFINIBAND:
		return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET:
		return "Ethernet";
	default:
		return "unspecified";
	}
}

static json_t *ports_to_json(struct ibv_context *ctx, uint8_t nports)
{
	json_t *arr = json_array();

	for (uint8_t p = 1; arr && p <= nports; p++) {
		struct ibv_port_attr attr;
		if (ibv_query_port(ctx, p, &attr))
			continue;
		json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:i}", "port", p, "state",
						     ibv_port_state_str(attr.state), "link_layer",
						     link_layer_name(attr.link_layer), "active_mtu",
						     128 << attr.active_mtu));
	}
	return arr;
}

static json_t *device_to_json(struct ibv_device *dev)
{
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_device_attr attr;
	json_t *o = json_pack("{s:s}", "name", ibv_get_device_name(dev));

	if (!o || !ctx)
		goto out;
	if (ibv_query_device(ctx, &attr) == 0)
		json_object_set_new(o, "ports", ports_to_json(ctx, attr.phys_port_cnt));
out:
	if (ctx)
		ibv_close_device(ctx);
	return o;
}

int xd_handle_list_devices(struct xd_call *call)
{
	char why[160] = "available";
	int n = 0;

	if (xd_unpack_params(call, "{}"))
		return -EINVAL;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	json_t *arr = json_array();
	if (!list)
		snprintf(why, sizeof(why), "unavailable: ibv_get_device_list: %s",
			 strerror(errno ? errno : ENODEV));
	else if (n == 0)
		snprintf(why, sizeof(why), "unavailable: no RDMA devices");
	for (int i = 0; arr && i < n; i++)
		json_array_append_new(arr, device_to_json(list[i]));
	if (list)
		ibv_free_device_list(list);
	call->result = json_pack("{s:s, s:o}", "rdma", why, "devices", arr);
	return 0;
}
