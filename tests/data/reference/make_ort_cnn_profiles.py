import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
rng=np.random.default_rng(0)
def init(name, shape): return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
inits=[init('w1',(16,3,3,3)),init('b1',(16,)),init('w2',(32,16,3,3)),init('b2',(32,)),
       init('bn_s',(32,)),init('bn_b',(32,)),init('bn_m',(32,)),numpy_helper.from_array(np.abs(rng.standard_normal(32)).astype(np.float32)+0.5,'bn_v'),
       init('fcw',(32*8*8,10)),init('fcb',(10,)),numpy_helper.from_array(np.array([0,-1],dtype=np.int64),'shape')]
nodes=[helper.make_node('Conv',['x','w1','b1'],['c1'],name='/conv1/Conv',pads=[1,1,1,1]),
 helper.make_node('Relu',['c1'],['r1'],name='/relu1/Relu'),
 helper.make_node('Conv',['r1','w2','b2'],['c2'],name='/conv2/Conv',pads=[1,1,1,1]),
 helper.make_node('BatchNormalization',['c2','bn_s','bn_b','bn_m','bn_v'],['bn'],name='/bn2/BatchNormalization'),
 helper.make_node('Relu',['bn'],['r2'],name='/relu2/Relu'),
 helper.make_node('MaxPool',['r2'],['p'],name='/pool/MaxPool',kernel_shape=[2,2],strides=[2,2]),
 helper.make_node('Flatten',['p'],['f'],name='/flatten/Flatten',axis=1),
 helper.make_node('MatMul',['f','fcw'],['mm'],name='/fc/MatMul'),
 helper.make_node('Add',['mm','fcb'],['fc'],name='/fc/Add'),
 helper.make_node('Softmax',['fc'],['y'],name='/softmax/Softmax',axis=1)]
g=helper.make_graph(nodes,'cnn',[helper.make_tensor_value_info('x',TensorProto.FLOAT,[4,3,16,16])],[helper.make_tensor_value_info('y',TensorProto.FLOAT,[4,10])],inits)
m=helper.make_model(g,opset_imports=[helper.make_opsetid('',13)]); m.ir_version=8
onnx.checker.check_model(m); onnx.save(m,'cnn.onnx')
so=ort.SessionOptions(); so.enable_profiling=True; so.profile_file_prefix='ort_cnn_ext'; so.intra_op_num_threads=1
so.graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
s=ort.InferenceSession('cnn.onnx',so,providers=['CPUExecutionProvider'])
x=rng.standard_normal((4,3,16,16)).astype(np.float32)
for _ in range(4): s.run(None,{'x':x})
print(s.end_profiling(), ort.__version__)
