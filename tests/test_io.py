"""Host transfers (spec: infeed, outfeed, send, recv) through si.HostQueues.

Values are hand-checked: JAX no longer emits infeed/outfeed, and XLA CPU and
the reference interpreter do not take host queues from Python.
"""

from __future__ import annotations

import numpy as np
import pytest

import stablehlo_interp as si

INFEED_OUTFEED = """
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %token = stablehlo.create_token : !stablehlo.token
  %in:3 = "stablehlo.infeed"(%token) {infeed_config = ""} : (!stablehlo.token) -> (tensor<2xf32>, tensor<i32>,
                                                                                      !stablehlo.token)
  %scaled = stablehlo.multiply %in#0, %x : tensor<2xf32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %next = stablehlo.add %in#1, %c1 : tensor<i32>
  %out = "stablehlo.outfeed"(%scaled, %next, %in#2) {outfeed_config = ""} : (tensor<2xf32>, tensor<i32>,
                                                                              !stablehlo.token) -> !stablehlo.token
  %again:2 = "stablehlo.infeed"(%out) {infeed_config = ""} : (!stablehlo.token) -> (tensor<2xf32>, !stablehlo.token)
  %sum = stablehlo.add %again#0, %x : tensor<2xf32>
  return %sum : tensor<2xf32>
}
"""


def test_infeed_and_outfeed():
    io = si.HostQueues(infeed=[[np.array([1.0, 2.0], np.float32), np.int32(41)]])
    io.put_infeed(np.array([10.0, 20.0], np.float32))
    (result,) = si.run(INFEED_OUTFEED, np.array([3.0, 4.0], np.float32), io=io)
    np.testing.assert_array_equal(result, [13.0, 24.0])
    assert not io.infeed
    ((scaled, counter),) = io.outfeed
    np.testing.assert_array_equal(scaled, [3.0, 8.0])
    assert counter.dtype == np.int32 and counter == 42


def test_queues_outlive_a_run():
    program = si.load(INFEED_OUTFEED)
    io = si.HostQueues(infeed=[[[1.0, 1.0], 0], [[0.0, 0.0]], [[2.0, 2.0], 5], [[1.0, 1.0]]])  # lists convert
    x = np.ones(2, np.float32)
    first = program.run(x, io=io)[0]
    second = program.run(x, io=io)[0]
    np.testing.assert_array_equal(first, [1.0, 1.0])
    np.testing.assert_array_equal(second, [2.0, 2.0])
    assert [int(entry[1]) for entry in io.outfeed] == [1, 6]


def test_empty_infeed_is_an_error_naming_the_op():
    with pytest.raises(si.OpExecutionError, match="infeed queue is empty") as info:
        si.run(INFEED_OUTFEED, np.ones(2, np.float32))
    assert info.value.op_name == "stablehlo.infeed"


@pytest.mark.parametrize("entry, message", [
    ([np.zeros(3, np.float32), np.int32(0)], "shape"),
    ([np.zeros(2, np.float64), np.int32(0)], "float64"),
    ([np.zeros(2, np.float32)], "holds 1 values; the op produces 2"),
])
def test_infeed_entries_must_match_the_result_types(entry, message):
    with pytest.raises(si.OpExecutionError, match=message):
        si.run(INFEED_OUTFEED, np.ones(2, np.float32), io=si.HostQueues(infeed=[entry]))


SEND_RECV = """
func.func @main(%x: tensor<3xi32>) -> (tensor<3xi32>, tensor<f32>) {
  %token = stablehlo.after_all : !stablehlo.token
  %sent = "stablehlo.send"(%x, %token) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 2>,
                                        is_host_transfer = true} : (tensor<3xi32>, !stablehlo.token) -> !stablehlo.token
  %r:3 = "stablehlo.recv"(%sent) {channel_handle = #stablehlo.channel_handle<handle = 2, type = 3>,
                                  is_host_transfer = true} : (!stablehlo.token) -> (tensor<3xi32>, tensor<f32>,
                                                                                   !stablehlo.token)
  %doubled = stablehlo.add %r#0, %r#0 : tensor<3xi32>
  %loop = "stablehlo.send"(%doubled, %r#2) {channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>}
      : (tensor<3xi32>, !stablehlo.token) -> !stablehlo.token
  %back:2 = "stablehlo.recv"(%loop) {channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>}
      : (!stablehlo.token) -> (tensor<3xi32>, !stablehlo.token)
  return %back#0, %r#1 : tensor<3xi32>, tensor<f32>
}
"""


def test_send_and_recv_on_channels():
    io = si.HostQueues(channels={2: [[np.array([1, 2, 3], np.int32), np.float32(0.5)]]})
    doubled, scalar = si.run(SEND_RECV, np.array([7, 8, 9], np.int32), io=io)
    np.testing.assert_array_equal(doubled, [2, 4, 6])  # sent and received on device-to-device channel 5
    assert scalar == 0.5
    (sent,) = io.get(1)
    np.testing.assert_array_equal(sent, [7, 8, 9])
    assert not io.channels[2] and not io.channels[5]
    with pytest.raises(si.InterpreterError, match="nothing was sent on channel 1"):
        io.get(1)


def test_recv_without_values_is_an_error():
    with pytest.raises(si.OpExecutionError, match="nothing to receive on channel 2") as info:
        si.run(SEND_RECV, np.zeros(3, np.int32))
    assert info.value.op_name == "stablehlo.recv"


def test_transfers_in_a_loop_keep_their_order():
    text = """
    func.func @main(%n: tensor<i32>) -> tensor<f32> {
      %token = stablehlo.create_token : !stablehlo.token
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %acc = stablehlo.constant dense<0.0> : tensor<f32>
      %r:4 = stablehlo.while(%i = %zero, %total = %acc, %t = %token, %bound = %n)
          : tensor<i32>, tensor<f32>, !stablehlo.token, tensor<i32>
        cond {
          %lt = stablehlo.compare LT, %i, %bound : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %lt : tensor<i1>
        } do {
          %in:2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> (tensor<f32>, !stablehlo.token)
          %sum = stablehlo.add %total, %in#0 : tensor<f32>
          %out = "stablehlo.outfeed"(%sum, %in#1) : (tensor<f32>, !stablehlo.token) -> !stablehlo.token
          %one = stablehlo.constant dense<1> : tensor<i32>
          %next = stablehlo.add %i, %one : tensor<i32>
          stablehlo.return %next, %sum, %out, %bound : tensor<i32>, tensor<f32>, !stablehlo.token, tensor<i32>
        }
      return %r#1 : tensor<f32>
    }"""
    io = si.HostQueues()
    for value in [1.0, 2.0, 4.0, 8.0]:
        io.put_infeed(np.float32(value))
    (total,) = si.run(text, np.int32(3), io=io)
    assert total == 7.0
    assert [float(entry[0]) for entry in io.outfeed] == [1.0, 3.0, 7.0]
    assert len(io.infeed) == 1


def test_quantized_values_cross_as_stored_integers():
    q = "!quant.uniform<i8:f32, 0.5:1>"
    text = f"""
    func.func @main() -> tensor<2xf32> {{
      %token = stablehlo.create_token : !stablehlo.token
      %in:2 = "stablehlo.infeed"(%token) : (!stablehlo.token) -> (tensor<2x{q}>, !stablehlo.token)
      %out = "stablehlo.outfeed"(%in#0, %in#1) : (tensor<2x{q}>, !stablehlo.token) -> !stablehlo.token
      %f = stablehlo.uniform_dequantize %in#0 : (tensor<2x{q}>) -> tensor<2xf32>
      return %f : tensor<2xf32>
    }}"""
    io = si.HostQueues(infeed=[[np.array([3, -1], np.int8)]])
    (result,) = si.run(text, io=io)
    np.testing.assert_array_equal(result, [1.0, -1.0])
    np.testing.assert_array_equal(io.outfeed[0][0], np.array([3, -1], np.int8))
