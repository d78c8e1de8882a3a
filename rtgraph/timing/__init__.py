"""How long things take on the device: the one timing model the compiler and the emulator share.

:mod:`.costmodel` turns an op's flops and bytes into microseconds on a device spec;
:mod:`.task_costs` gives every task of a stream program its launch, compute and byte figures and
shares HBM and the host link between transfers; :mod:`.engine` is the discrete-event loop both the
emulator and the compiler's timing replay run on. It sits below both, so the compiler never
imports the emulator.
"""
