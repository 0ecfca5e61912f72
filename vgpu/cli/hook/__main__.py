"""python -m vgpu.cli.hook"""
import sys

from vgpu.cli.hook import main

sys.exit(main())
