"""GIL contention inside a subinterpreter with its own GIL (PEP 684,
`concurrent.interpreters`, 3.14+): in the subinterpreter, a hog thread runs
json.dumps over a large list (long C calls holding that interpreter's GIL)
while a waiter thread wakes every 0.5 ms and needs that GIL each time. In the
main interpreter a ticker thread does the same as the waiter: it contends with
nobody, because the hog holds another GIL.

Prints "tid <name> <native thread id>" for sub-hog, sub-waiter and
main-ticker, then "ready"; runs until killed.
"""
import concurrent.interpreters
import os
import threading
import time

SUB = '''
import json, os, threading, time

def hog():
    os.write(1, b"tid sub-hog %d\\n" % threading.get_native_id())
    data = [{"i": i, "s": "x" * 10} for i in range(200_000)]
    while True:
        json.dumps(data)

def waiter():
    os.write(1, b"tid sub-waiter %d\\n" % threading.get_native_id())
    while True:
        time.sleep(0.0005)

threading.Thread(target=hog, name="sub-hog").start()
threading.Thread(target=waiter, name="sub-waiter").start()
'''


def ticker():
    print("tid main-ticker", threading.get_native_id(), flush=True)
    while True:
        time.sleep(0.0005)


def main():
    interp = concurrent.interpreters.create()  # its own GIL
    # exec returns once the threads started; they run on in the subinterpreter
    threading.Thread(target=interp.exec, args=(SUB,), daemon=True).start()
    threading.Thread(target=ticker, name="main-ticker", daemon=True).start()
    time.sleep(0.5)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


main()
